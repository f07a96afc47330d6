//go:build linux

package remediate

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDynamicBinaryRunsThroughHostLoader: a dynamically linked containerd
// under --host-root runs with that root's own ELF interpreter and
// libraries, not the container's. The stand-in is this machine's env(1)
// with the loader and libc copied into a scratch root.
func TestDynamicBinaryRunsThroughHostLoader(t *testing.T) {
	interp, err := elfInterpreter("/usr/bin/env")
	if err != nil || interp == "" {
		t.Skipf("/usr/bin/env is not dynamically linked here (%q, %v)", interp, err)
	}
	root := t.TempDir()
	cp := func(from, to string) {
		t.Helper()
		src, err := os.Open(from)
		if err != nil {
			t.Skipf("%s: %v", from, err)
		}
		defer src.Close()
		dst := filepath.Join(root, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, src); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	cp("/usr/bin/env", "usr/bin/env")
	cp(interp, interp)
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("no x86-64 glibc here: %v", err)
	}
	cp(libc, "lib/x86_64-linux-gnu/libc.so.6")
	c := Containerd{Binary: filepath.Join(root, "usr/bin/env"), Root: root}
	cmd, err := c.command(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Path != filepath.Join(root, interp) || !strings.Contains(strings.Join(cmd.Args, " "), "--library-path "+filepath.Join(root, "lib/x86_64-linux-gnu")) {
		t.Fatalf("command %q: want the host root's loader with its libraries", cmd.Args)
	}
	out, err := c.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "PATH=") {
		t.Fatalf("env through the host loader printed %q", out)
	}
	// A static binary (containerd as the tests build it) runs directly.
	static := Containerd{Binary: ctrBinary(t, newest()), Root: root}
	if cmd, err := static.command(context.Background(), "--version"); err != nil || cmd.Path != static.Binary {
		t.Fatalf("static binary: %v %v", cmd, err)
	}
}
