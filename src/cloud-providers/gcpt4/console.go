// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/consoleline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// What the podVM says on its serial console: the lines its own services
// print, each a prefix (package consoleline) and a JSON body.

// consoleTailLines is how many of the console's last lines a failure keeps
// (in its Event and the adaptor's log), and consoleLineMax cuts each.
const (
	consoleTailLines = 20
	consoleLineMax   = 300
)

// gpuReport is the part of gpu-init's readiness line the provider reads.
type gpuReport struct {
	State  string `json:"state"`
	GPUs   int    `json:"gpus"`
	Driver string `json:"driver"`
	Step   string `json:"step"`
	Reason string `json:"reason"`
	Ms     int64  `json:"elapsed_ms"`
}

// storeReport is the part of the cache disk's line the provider reads.
// The line is the podVM's word, written before any workload runs there,
// yet it is read as input: each field is checked against what
// podvm-cache-store prints, and the reason cleaned, redacted and cut.
type storeReport struct {
	State     string `json:"state"`
	Miss      string `json:"miss"`
	Reason    string `json:"reason"`
	Images    int    `json:"images"`
	Integrity string `json:"integrity"`
}

// storeMisses are the misses podvm-cache-store prints (imagestore's and
// cachestore's); any other is reported as "other". no-verity and
// verity-refused come before the mount: the disk is not used at all.
var storeMisses = []string{"no-store", "half-written", "other-guest-components", "moved", "tampered",
	"other-config-digest", "layer-missing", "work-dir-in-use", "stopped", "podvm", "no-verity", "verity-refused"}

// check keeps what the provider may act on and print; false drops the
// line (a state podvm-cache-store does not print).
func (r *storeReport) check() bool {
	switch r.State {
	case "in-use":
		r.Miss, r.Reason = "", ""
	case "unused":
		if !slices.Contains(storeMisses, r.Miss) {
			r.Miss = "other"
		}
	default:
		return false
	}
	if r.Integrity != "dm-verity" && r.Integrity != "read" {
		r.Integrity = ""
	}
	r.Images = max(0, min(r.Images, 1<<20))
	inPEM := false
	r.Reason = redactConsoleLine(cleanConsoleLine(r.Reason), &inPEM)
	return true
}

// diskUnused says whether the miss kept the whole disk out (the open
// failed): then neither the mirror nor the store runs.
func (r *storeReport) diskUnused() bool {
	return r.Miss == "no-verity" || r.Miss == "verity-refused"
}

// layersReport is the sweep's line. Printed while the pod's workload
// runs in the podVM, it is read as input like every console line: counts
// and sizes are bounded, anything else in it is ignored.
type layersReport struct {
	Removed      int64 `json:"removed"`
	RemovedBytes int64 `json:"removed_bytes"`
	Pending      int64 `json:"pending"`
	PendingBytes int64 `json:"pending_bytes"`
	FreeBytes    int64 `json:"free_bytes"`
}

// check bounds the report; false drops a line with nothing to tell.
func (r *layersReport) check() bool {
	for _, v := range []*int64{&r.Removed, &r.RemovedBytes, &r.Pending, &r.PendingBytes, &r.FreeBytes} {
		*v = max(0, min(*v, 1<<50))
	}
	return r.Removed > 0 || r.Pending > 0
}

// tell says whether the pod hears of the line: layers were removed (a
// pull failed part-way and its layers were reclaimed), or what pulls in
// flight or failed hold is more than the disk has left. A pull that is
// merely unpacking is not news.
func (r *layersReport) tell() bool {
	return r.Removed > 0 || r.PendingBytes > r.FreeBytes
}

// consoleLine is one line of the console, classified.
type consoleLine struct {
	text   string
	gpu    *gpuReport
	store  *storeReport
	layers *layersReport
	pull   *pullReport
	// failure is podevent.FailureBoot or podevent.FailureCDH for those lines.
	failure string
}

// kernelStampRE is the kernel's printk time ("[   12.345678] "), which
// starts a line the kernel printed. The image's services write their
// lines to /dev/console bare; a line counts as theirs only when it starts
// with its prefix, after such a time at most. A prefix further in (a
// program echoing one, a log quoting it) decides nothing.
var kernelStampRE = regexp.MustCompile(`^\[ *[0-9]+\.[0-9]+\] `)

// consoleBody is a cleaned line without its kernel time, if any.
func consoleBody(line string) string {
	return strings.TrimPrefix(line, kernelStampRE.FindString(line))
}

func parseConsoleLine(raw string) consoleLine {
	line := cleanConsoleLine(raw)
	out := consoleLine{text: line}
	body := consoleBody(line)
	switch {
	case strings.HasPrefix(body, consoleline.GPUPrefix):
		var r gpuReport
		if json.Unmarshal([]byte(strings.TrimSpace(body[len(consoleline.GPUPrefix):])), &r) == nil && r.State != "" {
			r.redact()
			out.gpu = &r
		}
	case strings.HasPrefix(body, consoleline.BootFailedPrefix):
		out.failure = podevent.FailureBoot
	case strings.HasPrefix(body, consoleline.CDHFailedPrefix):
		out.failure = podevent.FailureCDH
	case strings.HasPrefix(body, consoleline.StorePrefix):
		var r storeReport
		if json.Unmarshal([]byte(strings.TrimSpace(body[len(consoleline.StorePrefix):])), &r) == nil && r.check() {
			out.store = &r
		}
	case strings.HasPrefix(body, consoleline.PullPrefix):
		out.pull = parsePullLine(body[len(consoleline.PullPrefix):])
	case strings.HasPrefix(body, consoleline.LayersPrefix):
		var r layersReport
		if json.Unmarshal([]byte(strings.TrimSpace(body[len(consoleline.LayersPrefix):])), &r) == nil && r.check() {
			out.layers = &r
		}
	}
	return out
}

// driverRE is an NVIDIA driver version (550.163.01).
var driverRE = regexp.MustCompile(`^[0-9][0-9A-Za-z.+_-]{0,31}$`)

// redact makes the report's text fit for an Event. JSON's escapes
// (\u001b) decode to what the line's cleaning took out, and the line was
// redacted as text, not as the fields it holds: each field is cleaned and
// redacted on its own. A driver that is no version is dropped.
func (r *gpuReport) redact() {
	field := func(s string) string {
		inPEM := false
		return redactConsoleLine(cleanConsoleLine(s), &inPEM)
	}
	r.State, r.Step, r.Reason = field(r.State), field(r.Step), field(r.Reason)
	if !driverRE.MatchString(r.Driver) {
		r.Driver = ""
	}
}

// ansiRE matches terminal escape sequences (systemd colours its status).
var ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// cleanConsoleLine drops escapes, control, bidi and invisible format
// characters (hidden) and a trailing carriage return.
func cleanConsoleLine(s string) string {
	s = ansiRE.ReplaceAllString(s, "")
	return strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if hidden(r) {
			return -1
		}
		return r
	}, s)
}

// Console output can hold what must not reach an Event: anything a
// program on the podVM printed. The podVM's own services print no
// secrets, but a workload's init or a debug image may, so lines that look
// like key material or credentials are masked before they are kept.
var (
	// An Authorization header's value is all of the rest of the line.
	authRE     = regexp.MustCompile(`(?i)(authorization\s*[=:]\s*).*`)
	secretKVRE = regexp.MustCompile(`(?i)((?:pass(?:word|wd)?|secret|token|credential|private[_-]?key|api[_-]?key|authorization|bearer)[^=:\s]*\s*[=:]\s*)("[^"]*"|'[^']*'|\S+)`)
	// A command line's flag with its value after a space (--password X);
	// the --password=X form is secretKVRE's.
	secretFlagRE = regexp.MustCompile(`(?i)(\s|^)(--?(?:pass(?:word|wd)?|secret|token|credentials?|private[_-]?key|api[_-]?key|access[_-]?key|auth)[a-z0-9_-]*\s+)("[^"]*"|'[^']*'|[^\s-]\S*)`)
	bearerRE     = regexp.MustCompile(`(?i)\bbearer\s+\S+`)
	// Tokens with a known prefix, too short for blobRE: GitHub's (ghp_,
	// gho_, ghu_, ghs_, ghr_ and fine-grained github_pat_), GitLab's
	// glpat-, Slack's xox?-, AWS access key IDs, Google API keys (AIza,
	// 39 characters) and OAuth access tokens (ya29.). Anchored at a word's
	// start so that a prefix inside a word is not one.
	tokenRE = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,})`)
	// A run of base64 with both cases and a digit: an encoded key or
	// user-data, 32 characters and more (an AWS secret key is 40). Hex
	// digests (one case) and paths are left alone (blobSecret).
	blobRE = regexp.MustCompile(`[A-Za-z0-9+/_=-]{32,}`)
	// stdBase64RE is the standard alphabet, padded: a run of it with a
	// '/' is a secret when a part between slashes is long (a path's
	// parts are short, or hold '.', '-' or '_').
	stdBase64RE = regexp.MustCompile(`^[A-Za-z0-9+/]+={0,2}$`)
)

// blobSecret reports whether a blobRE run is key material.
func blobSecret(b string) bool {
	mixed := strings.ContainsAny(b, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ContainsAny(b, "abcdefghijklmnopqrstuvwxyz") && strings.ContainsAny(b, "0123456789")
	switch {
	case mixed && !strings.Contains(b, "/"):
		return true
	case mixed && stdBase64RE.MatchString(b):
		for part := range strings.SplitSeq(b, "/") {
			if len(part) >= 16 {
				return true
			}
		}
	}
	return strings.ContainsAny(b, "+=") && len(b) >= 64
}

// redactConsoleLine masks secrets in one cleaned line; inPEM carries a
// PEM block's state across lines.
func redactConsoleLine(line string, inPEM *bool) string {
	if strings.Contains(line, "-----BEGIN ") {
		*inPEM = !strings.Contains(line, "-----END ")
		return "[redacted: key material]"
	}
	if *inPEM {
		if strings.Contains(line, "-----END ") {
			*inPEM = false
		}
		return "[redacted: key material]"
	}
	line = authRE.ReplaceAllString(line, "${1}[redacted]")
	line = secretKVRE.ReplaceAllString(line, "${1}[redacted]")
	line = secretFlagRE.ReplaceAllString(line, "${1}${2}[redacted]")
	line = bearerRE.ReplaceAllString(line, "Bearer [redacted]")
	line = tokenRE.ReplaceAllString(line, "[redacted]")
	line = blobRE.ReplaceAllStringFunc(line, func(b string) string {
		if blobSecret(b) {
			return "[redacted]"
		}
		return b
	})
	if len(line) > consoleLineMax {
		line = cutUTF8(line, consoleLineMax) + "…"
	}
	return line
}

// consoleReader splits a console read in pieces into lines, redacted,
// and keeps the last consoleTailLines of them.
type consoleReader struct {
	next    int64
	partial string
	inPEM   bool
	lost    bool
	tail    []string
}

// feed takes the contents GCE returned from start (its answer's start,
// which is later than asked when older output was overwritten) and
// returns the complete new lines, classified.
func (c *consoleReader) feed(start, next int64, contents string) []consoleLine {
	if start > c.next {
		// GCE keeps the last 1 MB: output between c.next and start is
		// gone, and so is the line it was in.
		c.partial = ""
		c.lost = true
	}
	c.next = next
	text := c.partial + contents
	parts := strings.Split(text, "\n")
	c.partial = parts[len(parts)-1]
	var out []consoleLine
	for _, raw := range parts[:len(parts)-1] {
		l := parseConsoleLine(raw)
		if strings.TrimSpace(l.text) == "" {
			continue
		}
		l.text = redactConsoleLine(l.text, &c.inPEM)
		c.tail = append(c.tail, l.text)
		if len(c.tail) > consoleTailLines {
			c.tail = c.tail[len(c.tail)-consoleTailLines:]
		}
		out = append(out, l)
	}
	return out
}

// lastLines is the tail, with the unterminated last line if any.
func (c *consoleReader) lastLines() []string {
	out := append([]string(nil), c.tail...)
	if p := strings.TrimSpace(cleanConsoleLine(c.partial)); p != "" {
		inPEM := c.inPEM
		out = append(out, redactConsoleLine(p, &inPEM))
	}
	if len(out) > consoleTailLines {
		out = out[len(out)-consoleTailLines:]
	}
	return out
}
