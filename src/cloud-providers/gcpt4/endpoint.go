// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"fmt"
	"net/url"
	"strings"
)

// endpointFix is how to give GCP_ENDPOINT, for every refusal.
const endpointFix = "give https://HOST with HOST under googleapis.com (a Private Service Connect endpoint such as compute-ENDPOINT.p.googleapis.com), or http://HOST:PORT for a local emulator, which gets no credentials; leave it empty for Google's default"

// ParseEndpoint checks an API endpoint as GCP_ENDPOINT takes it (setting
// names it in errors) and returns it in canonical form (scheme and host
// lowercased, no trailing slash), which is what the clients are given,
// and whether credentials may be sent to it. Empty is Google's default
// endpoint, which gets them.
//
// Credentials go to Google only: https and a host that is googleapis.com
// or under it. That covers compute.googleapis.com, regional endpoints
// (compute.REGION.rep.googleapis.com), the Private Google Access names
// (private.googleapis.com, restricted.googleapis.com) and Private Service
// Connect endpoints for Google APIs, whose DNS names are
// SERVICE-ENDPOINT.p.googleapis.com ("About accessing Google APIs through
// endpoints", cloud.google.com/vpc/docs/about-accessing-google-apis-endpoints);
// a PSC endpoint's bare IP address would not match Google's certificate
// anyway. Every other endpoint, http in any letter case (a local
// emulator) or https elsewhere (a test server, a proxy), is accepted and
// gets no credentials at all: neither GCP_CREDENTIALS nor Application
// Default Credentials (Workload Identity, the metadata server). A host that
// is not Google's never needs Google's token (an emulator checks none; a
// proxy that authenticates holds its own identity), so the rule needs no
// setting to open it and no setting can leak the token.
func ParseEndpoint(setting, raw string) (canonical string, credentials bool, err error) {
	if raw == "" {
		return "", true, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("%s: %q is not a URL (%v); %s", setting, raw, err, endpointFix)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case u.Scheme == "":
		return "", false, fmt.Errorf("%s: %q has no scheme; %s", setting, raw, endpointFix)
	case scheme != "http" && scheme != "https":
		return "", false, fmt.Errorf("%s: %q: scheme %s is not http or https; %s", setting, raw, u.Scheme, endpointFix)
	case u.Opaque != "" || u.Hostname() == "":
		return "", false, fmt.Errorf("%s: %q has no host; %s", setting, raw, endpointFix)
	case u.User != nil:
		return "", false, fmt.Errorf("%s: %q carries a user name or password; credentials come from GCP_CREDENTIALS or Application Default Credentials, never from the URL; %s", setting, raw, endpointFix)
	case u.RawQuery != "" || u.ForceQuery:
		return "", false, fmt.Errorf("%s: %q has a query; %s", setting, raw, endpointFix)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "", false, fmt.Errorf("%s: %q has a fragment; %s", setting, raw, endpointFix)
	}
	u.Scheme = scheme
	u.Host = strings.ToLower(u.Host)
	host := strings.TrimSuffix(u.Hostname(), ".")
	google := host == "googleapis.com" || strings.HasSuffix(host, ".googleapis.com")
	return strings.TrimSuffix(u.String(), "/"), scheme == "https" && google, nil
}
