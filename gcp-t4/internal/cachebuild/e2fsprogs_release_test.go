package cachebuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A policy as apt-cache prints it on a machine with bookworm-backports'
// e2fsprogs installed (this project's podVM build host), and one with
// Debian 12's own installed (a fresh machine).
const (
	policyBackports = `e2fsprogs:
  Installed: 1.47.2-3~bpo12+1
  Candidate: 1.47.2-3~bpo12+1
  Version table:
 *** 1.47.2-3~bpo12+1 100
        100 http://deb.debian.org/debian bookworm-backports/main amd64 Packages
        100 /var/lib/dpkg/status
     1.47.0-2+b2 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
`
	policyFresh = `e2fsprogs:
  Installed: 1.47.0-2+b2
  Candidate: 1.47.0-2+b2
  Version table:
 *** 1.47.0-2+b2 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
        100 /var/lib/dpkg/status
`
	policyNoBookworm = `e2fsprogs:
  Installed: (none)
  Candidate: 1.47.2-3~bpo12+1
  Version table:
     1.47.2-3~bpo12+1 100
        100 http://deb.debian.org/debian bookworm-backports/main amd64 Packages
`
)

// releaseScript runs test/cache/e2fsprogs-release.sh with fake apt-cache
// and apt-get first on PATH: apt-cache prints policy; apt-get download
// copies the .deb of each asked package from debs (none when debs is
// empty) and appends its arguments to a log.
type releaseScript struct {
	t        *testing.T
	bin      string // the fakes
	cache    string // XDG_CACHE_HOME
	debs     string
	calls    string
	realPATH bool // the system's tools after the fakes
}

func newReleaseScript(t *testing.T, policy string) *releaseScript {
	r := &releaseScript{t: t, bin: t.TempDir(), cache: t.TempDir(), debs: t.TempDir(), realPATH: true}
	r.calls = filepath.Join(r.bin, "calls")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(r.bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.bin, "policy"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	write("apt-cache", `cat "`+filepath.Join(r.bin, "policy")+`"`+"\n")
	write("apt-get", `echo "$*" >> "`+r.calls+`"
[ "$1" = download ] || exit 1
if [ -e "`+r.bin+`/fail" ]; then echo "E: Unable to locate package e2fsprogs" >&2; exit 100; fi
shift
for a in "$@"; do
	case "$a" in -*) continue ;; esac
	p=${a%/bookworm}
	[ "$p/bookworm" = "$a" ] || { echo "asked for $a, not from bookworm" >&2; exit 1; }
	cp "`+r.debs+`/$p"_*.deb . 2>/dev/null || true
done
`)
	return r
}

// deb builds a package holding files (path → shell script body).
func (r *releaseScript) deb(pkg string, files map[string]string) {
	r.t.Helper()
	root := r.t.TempDir()
	must := func(err error) {
		if err != nil {
			r.t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
	must(os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte("Package: "+pkg+"\nVersion: 1.47.0-2+b2\nArchitecture: amd64\nMaintainer: test <test@example.org>\nDescription: test\n"), 0o644))
	for p, body := range files {
		must(os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		must(os.WriteFile(filepath.Join(root, p), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	}
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", root, filepath.Join(r.debs, pkg+"_1.47.0-2+b2_amd64.deb")).CombinedOutput(); err != nil {
		r.t.Fatalf("dpkg-deb -b: %v: %s", err, b)
	}
}

func (r *releaseScript) debs4(mke2fs string) {
	r.deb("e2fsprogs", map[string]string{"sbin/mke2fs": mke2fs, "sbin/debugfs": "exit 0"})
	for _, p := range []string{"libext2fs2", "libss2", "libcom-err2"} {
		r.deb(p, map[string]string{"lib/x86_64-linux-gnu/" + p + ".marker": "exit 0"})
	}
}

func (r *releaseScript) run() (string, string, error) {
	r.t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(bash, filepath.Join(repoRoot, "test/cache/e2fsprogs-release.sh"))
	path := r.bin
	if r.realPATH {
		path += string(os.PathListSeparator) + os.Getenv("PATH")
	}
	cmd.Env = []string{"PATH=" + path, "HOME=" + r.t.TempDir(), "XDG_CACHE_HOME=" + r.cache}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return strings.TrimSpace(out.String()), errb.String(), err
}

func (r *releaseScript) downloads() int {
	b, _ := os.ReadFile(r.calls)
	return strings.Count(string(b), "download")
}

// Every path of test/cache/e2fsprogs-release.sh, which TestCacheDiskImage
// relies on for Debian 12's own e2fsprogs.
func TestE2fsprogsReleaseScript(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("builds .deb files with dpkg-deb (Debian's dpkg)")
	}
	t.Run("fetched once, then read from the cache", func(t *testing.T) {
		for name, policy := range map[string]string{"backports installed": policyBackports, "bookworm's installed": policyFresh} {
			t.Run(name, func(t *testing.T) {
				r := newReleaseScript(t, policy)
				r.debs4(`echo "mke2fs 1.47.0 (5-Feb-2023)"`)
				dir, stderr, err := r.run()
				want := filepath.Join(r.cache, "caa-gcp-t4", "e2fsprogs-1.47.0-2+b2")
				if err != nil || dir != want {
					t.Fatalf("printed %q (%v), want %q; stderr: %s", dir, err, want, stderr)
				}
				for _, f := range []string{"sbin/mke2fs", "sbin/debugfs", "lib/x86_64-linux-gnu/libss2.marker", "lib/x86_64-linux-gnu/libcom-err2.marker"} {
					if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
						t.Errorf("%s not unpacked: %v", f, err)
					}
				}
				if again, _, err := r.run(); err != nil || again != dir || r.downloads() != 1 {
					t.Errorf("second run: %q (%v), %d downloads in all, want the cached %q and 1", again, err, r.downloads(), dir)
				}
				left, _ := filepath.Glob(filepath.Join(r.cache, "caa-gcp-t4", ".e2fsprogs.*"))
				if len(left) != 0 {
					t.Errorf("left behind: %v", left)
				}
			})
		}
	})
	failures := []struct {
		name, policy, mke2fs string
		noDebs, noApt, fail  bool
		want                 string
	}{
		{name: "download fails", policy: policyBackports, fail: true, want: "E: Unable to locate package e2fsprogs\ne2fsprogs-release.sh: apt-get download e2fsprogs/bookworm libext2fs2/bookworm libss2/bookworm libcom-err2/bookworm failed\ne2fsprogs-release.sh: apt-get download e2fsprogs/bookworm fetched nothing"},
		{name: "no apt-get", noApt: true, want: "no apt-get"},
		{name: "no bookworm/main", policy: policyNoBookworm, want: "apt knows no e2fsprogs from bookworm/main; as root run: apt-get update"},
		{name: "nothing fetched", policy: policyBackports, noDebs: true, want: "apt-get download e2fsprogs/bookworm fetched nothing"},
		{name: "mke2fs does not run", policy: policyBackports, mke2fs: "exit 3", want: "the unpacked mke2fs does not run"},
	}
	for _, c := range failures {
		t.Run(c.name, func(t *testing.T) {
			r := newReleaseScript(t, c.policy)
			if c.noApt {
				r.realPATH = false
				os.Remove(filepath.Join(r.bin, "apt-get"))
			}
			if !c.noDebs && !c.noApt {
				r.debs4(c.mke2fs)
			}
			if c.fail {
				if err := os.WriteFile(filepath.Join(r.bin, "fail"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir, stderr, err := r.run()
			if err == nil || dir != "" || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %v, printed %q, stderr %q; want a failure saying %q", err, dir, stderr, c.want)
			}
			entries, _ := os.ReadDir(filepath.Join(r.cache, "caa-gcp-t4"))
			if len(entries) != 0 {
				t.Errorf("a failed run left %v in the cache", entries)
			}
		})
	}
}
