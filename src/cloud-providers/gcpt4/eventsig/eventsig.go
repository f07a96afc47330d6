// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package eventsig signs the start-up Events the gcp-t4 provider writes,
// so that what reads them for facts (the reaper's metrics, `gcp-t4
// status`) can tell them from Events a tenant wrote. A tenant with the
// stock `edit` role can create any Event in its namespace, labels and
// annotations included (kubernetes/kubernetes#102858), so neither the
// labels nor the source component prove who wrote one.
//
// The proof is an HMAC-SHA256 over the Event's fields that carry facts,
// keyed by a Secret in the adaptor's own namespace that tenants cannot
// read (SecretName). The provider creates the key the first time it
// needs one; the reaper and `gcp-t4 status` read it. An Event whose
// signature does not verify is still shown to people by kubectl, but is
// never counted, costed or timed.
//
// Stdlib only: this package is part of the drop-in provider.
package eventsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

const (
	// SignatureAnnotation carries the signature (base64url, no padding).
	SignatureAnnotation = "caa-gcp-t4/signature"
	// SecretName is the Secret, in the adaptor's namespace, holding the key
	// under SecretKey.
	SecretName = "gcp-t4-event-key"
	// SecretKey is the key's entry in the Secret's data.
	SecretKey = "key"
	// KeySize is the key's length in bytes: HMAC-SHA256's block is 64
	// bytes, and 32 random bytes leave nothing to guess.
	KeySize = 32
	// prefix selects the labels and annotations that are facts: the
	// provider's schema (gcpt4.Event…Label, gcpt4.Event…Annotation).
	prefix = "caa-gcp-t4/"
)

// Fields are what a signature covers: where the Event is, what it is
// about, what it says, and every label and annotation of the provider's
// schema. A tenant who edits any of them, adds a schema annotation, copies
// the Event under another name or into another namespace, or points it at
// another pod breaks the signature. Counts and timestamps are left out:
// the facts' time is the caa-gcp-t4/at annotation, which is covered.
type Fields struct {
	Namespace string
	Name      string
	// Kind, Object and ObjectUID are the involved object's.
	Kind      string
	Object    string
	ObjectUID string
	Reason    string
	Type      string
	Message   string
	// Labels and Annotations may hold anything; only the schema's keys
	// (and never the signature itself) are signed.
	Labels      map[string]string
	Annotations map[string]string
}

// canonical is the signed form: JSON, for its ordered map keys, of
// strings made valid UTF-8 as the API server stores them (each invalid
// byte a U+FFFD, as encoding/json writes the provider's request), so the
// writer's string and the reader's decoded one sign alike.
type canonical struct {
	V           int               `json:"v"`
	Namespace   string            `json:"ns"`
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	Object      string            `json:"object"`
	ObjectUID   string            `json:"uid"`
	Reason      string            `json:"reason"`
	Type        string            `json:"type"`
	Message     string            `json:"message"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func schema(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && k != SignatureAnnotation {
			out[valid(k)] = valid(v)
		}
	}
	return out
}

// valid replaces each invalid byte of s with U+FFFD: a string's []rune
// form does exactly that, byte by byte, as encoding/json does.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s))
}

func mac(key []byte, f Fields) []byte {
	b, err := json.Marshal(canonical{V: 1, Namespace: valid(f.Namespace), Name: valid(f.Name), Kind: valid(f.Kind), Object: valid(f.Object),
		ObjectUID: valid(f.ObjectUID), Reason: valid(f.Reason), Type: valid(f.Type), Message: valid(f.Message),
		Labels: schema(f.Labels), Annotations: schema(f.Annotations)})
	if err != nil {
		// Strings and string maps always marshal.
		panic(err)
	}
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return h.Sum(nil)
}

// Sign is f's signature under key, for SignatureAnnotation.
func Sign(key []byte, f Fields) string {
	return base64.RawURLEncoding.EncodeToString(mac(key, f))
}

// Verify reports whether f carries a valid signature under key in its
// SignatureAnnotation. An empty key verifies nothing.
func Verify(key []byte, f Fields) bool {
	if len(key) == 0 {
		return false
	}
	sig, ok := f.Annotations[SignatureAnnotation]
	if !ok || len(sig) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac(key, f))
}

// ValidKey reports whether key is one this package made (KeySize bytes).
func ValidKey(key []byte) bool { return len(key) == KeySize }
