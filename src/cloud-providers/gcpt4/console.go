// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"regexp"
	"strings"
)

// What the podVM says on its serial console. The image's own services
// write one line each, with a fixed prefix and a JSON body, so that a
// reader finds them among kernel and systemd output (podvm/mkosi.extra:
// gpu-init's readiness line, boot-failed, cdh-check). The prefixes are
// repeated here because the provider may not import the gcp-t4 module;
// gcp-t4's tests check that both sides spell them alike.
const (
	// ConsoleGPUPrefix starts gpu-init's readiness line (ready, no-gpu or
	// failed, with the driver version and GPU count).
	ConsoleGPUPrefix = "CAA-GCP-T4-GPU "
	// ConsoleBootFailedPrefix starts the line the podVM prints instead of
	// an emergency shell before it powers itself off.
	ConsoleBootFailedPrefix = "CAA-GCP-T4-BOOT-FAILED "
	// ConsoleCDHFailedPrefix starts the line printed when the confidential
	// data hub did not listen, so kata-agent was not started.
	ConsoleCDHFailedPrefix = "CAA-GCP-T4-CDH-FAILED "
)

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

// consoleLine is one line of the console, classified.
type consoleLine struct {
	text string
	gpu  *gpuReport
	// failure is FailureBoot or FailureCDH for those lines.
	failure string
}

func parseConsoleLine(raw string) consoleLine {
	line := cleanConsoleLine(raw)
	out := consoleLine{text: line}
	switch {
	case strings.Contains(line, ConsoleGPUPrefix):
		var r gpuReport
		body := line[strings.Index(line, ConsoleGPUPrefix)+len(ConsoleGPUPrefix):]
		if json.Unmarshal([]byte(strings.TrimSpace(body)), &r) == nil && r.State != "" {
			// JSON's escapes (\u001b) decode to what the line's cleaning
			// took out: each field is cleaned again.
			r.State, r.Driver, r.Step, r.Reason = cleanConsoleLine(r.State), cleanConsoleLine(r.Driver), cleanConsoleLine(r.Step), cleanConsoleLine(r.Reason)
			out.gpu = &r
		}
	case strings.Contains(line, ConsoleBootFailedPrefix):
		out.failure = FailureBoot
	case strings.Contains(line, ConsoleCDHFailedPrefix):
		out.failure = FailureCDH
	}
	return out
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
	bearerRE   = regexp.MustCompile(`(?i)\bbearer\s+\S+`)
	// A long run of base64 with both cases and a digit: an encoded key or
	// user-data. Hex digests (one case) and paths are left alone.
	blobRE = regexp.MustCompile(`[A-Za-z0-9+/_=-]{48,}`)
)

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
	line = bearerRE.ReplaceAllString(line, "Bearer [redacted]")
	line = blobRE.ReplaceAllStringFunc(line, func(b string) string {
		if strings.ContainsAny(b, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ContainsAny(b, "abcdefghijklmnopqrstuvwxyz") && strings.ContainsAny(b, "0123456789") && !strings.Contains(b, "/") {
			return "[redacted]"
		}
		if strings.ContainsAny(b, "+=") && len(b) >= 64 {
			return "[redacted]"
		}
		return b
	})
	if len(line) > consoleLineMax {
		line = line[:consoleLineMax] + "…"
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
