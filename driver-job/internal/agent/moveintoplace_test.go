package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes name → content files under dir.
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A rename that fails halfway through leaves the volume exactly as it was: the entries already
// moved in are taken out again and the originals put back (before, the originals moved aside were
// deleted with the staging directory).
func TestMoveIntoPlaceRollsBack(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{"a/f": "old a", "b": "old b", "c": "old c", "keep": "not in the backup"})
	staging := filepath.Join(dir, ".coffer-restore-test")
	tree(t, filepath.Join(staging, "data"), map[string]string{"a/f": "new a", "b": "new b", "c": "new c", "d": "new d"})

	defer func() { renameHook = os.Rename }()
	renameHook = func(from, to string) error {
		if to == filepath.Join(dir, "c") && strings.Contains(from, string(filepath.Separator)+"data"+string(filepath.Separator)) {
			return errors.New("injected: no space left on device")
		}
		return os.Rename(from, to)
	}
	keep, err := moveIntoPlace(dir, staging)
	if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "as it was") {
		t.Fatalf("want the injected failure and a rollback, got %v", err)
	}
	if keep {
		t.Fatal("the rollback succeeded: the staging directory need not be kept")
	}
	for name, want := range map[string]string{"a/f": "old a", "b": "old b", "c": "old c", "keep": "not in the backup"} {
		if got := read(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s = %q after the failed restore, want the original %q", name, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d, which the backup added, must not be left behind: %v", err)
	}

	// Without a fault, every entry is replaced as a whole.
	renameHook = os.Rename
	staging2 := filepath.Join(dir, ".coffer-restore-test2")
	tree(t, filepath.Join(staging2, "data"), map[string]string{"a/f": "new a", "b": "new b"})
	if _, err := moveIntoPlace(dir, staging2); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(dir, "a/f")) != "new a" || read(t, filepath.Join(dir, "b")) != "new b" || read(t, filepath.Join(dir, "c")) != "old c" {
		t.Error("the restore did not replace a and b, or touched c")
	}
}
