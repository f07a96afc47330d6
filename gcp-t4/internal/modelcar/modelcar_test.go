package modelcar

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func model(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "models")
	for name, body := range map[string]string{"config.json": "{}", "model-00001-of-00002.safetensors": "aaaa", "sub/tokenizer.json": "{}"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The link leads through this process's root to the model, replaces a
// stale one in place, and is removed only while it is still ours.
func TestHoldLinksThroughTheProcessRoot(t *testing.T) {
	models := model(t)
	link := filepath.Join(t.TempDir(), "weights")
	if err := os.Symlink("/proc/1/root/gone", link); err != nil { // a restarted container's
		t.Fatal(err)
	}
	files, size, err := Hold(models, link, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if files != 3 || size != 8 {
		t.Errorf("Hold found %d files, %d bytes; want 3, 8", files, size)
	}
	if got, _ := os.Readlink(link); got != "/proc/"+strconv.Itoa(os.Getpid())+"/root"+models {
		t.Errorf("link → %s", got)
	}
	if b, err := os.ReadFile(filepath.Join(link, "sub/tokenizer.json")); err != nil || string(b) != "{}" {
		t.Errorf("through the link: %q %v", b, err)
	}
	if n, err := Check(link); err != nil || n != 3 {
		t.Errorf("Check = %d, %v", n, err)
	}
	if err := Unlink(link, os.Getpid()+1, models); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Error("Unlink removed a link another process owns")
	}
	if err := Unlink(link, os.Getpid(), models); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); err == nil {
		t.Error("Unlink left its own link")
	}
	if entries, _ := os.ReadDir(filepath.Dir(link)); len(entries) != 0 {
		t.Errorf("left in the volume: %v", entries)
	}
}

func TestHoldAndCheckRefuse(t *testing.T) {
	empty := t.TempDir()
	vol := t.TempDir()
	for name, tc := range map[string]struct {
		models, link, want string
	}{
		"relative":         {"models", filepath.Join(vol, "w"), "must be absolute"},
		"no model":         {filepath.Join(empty, "none"), filepath.Join(vol, "w"), "no such file"},
		"empty model":      {empty, filepath.Join(vol, "w"), "holds no file"},
		"no shared volume": {model(t), filepath.Join(vol, "absent", "w"), "mount a volume there"},
	} {
		if _, _, err := Hold(tc.models, tc.link, os.Getpid()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Hold: %v, want %q", name, err, tc.want)
		}
	}
	plain := filepath.Join(vol, "plain")
	if err := os.Symlink(empty, plain); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(vol, "dead")
	if err := os.Symlink("/proc/999999999/root/models", dead); err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{
		filepath.Join(vol, "missing"): "has not linked the model yet",
		plain:                         "not into a process's root",
		dead:                          "shareProcessNamespace",
	} {
		if _, err := Check(link); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%s): %v, want %q", link, err, want)
		}
	}
}

// The binary as the pod runs it: it links, the probe passes, SIGTERM ends
// it with 0 and takes the link away.
func TestBinaryHoldsUntilStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "modelcar")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/modelcar").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	models := model(t)
	link := filepath.Join(t.TempDir(), "weights")
	cmd := exec.CommandContext(context.Background(), bin, "-models", models, "-link", link)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"msg":"model linked"`) {
		t.Fatalf("first line: %q", sc.Text())
	}
	out, err := exec.Command(bin, "-check", "-link", link).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "leads to the model (3 entries)") {
		t.Errorf("-check: %v %s", err, out)
	}
	if got, _ := os.Readlink(link); got != Target(cmd.Process.Pid, models) {
		t.Errorf("link → %s, want the holder's root", got)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
	if _, err := os.Lstat(link); err == nil {
		t.Error("the link outlived the holder")
	}
	if out, err := exec.Command(bin, "-check", "-link", link).CombinedOutput(); err == nil {
		t.Errorf("-check passed with no holder: %s", out)
	}
	if out, err := exec.Command(bin, "extra").CombinedOutput(); cmd.ProcessState == nil || err == nil || !strings.Contains(string(out), "it takes flags only") {
		t.Errorf("an argument: %v %s", err, out)
	}
}
