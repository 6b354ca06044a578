package v1alpha1

import (
	"strings"
	"testing"
)

func TestPackListRoundTrip(t *testing.T) {
	l := &PackList{Sequence: 7, Packs: []ListedPack{
		{Name: strings.Repeat("a1", 16), Size: 8 << 20, SHA256: strings.Repeat("0f", 32), Added: true},
		{Name: strings.Repeat("b2", 16), Size: 12, SHA256: strings.Repeat("e3", 32)},
		{Name: strings.Repeat("c3", 16), Size: 1}, // written before pack lists
	}}
	b, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePackList(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if got.Sequence != l.Sequence || len(got.Packs) != len(l.Packs) {
		t.Fatalf("parsed %+v from\n%s", got, b)
	}
	for i := range l.Packs {
		if got.Packs[i] != l.Packs[i] {
			t.Errorf("pack %d: parsed %+v, wrote %+v", i, got.Packs[i], l.Packs[i])
		}
	}
}

func TestPackListRejects(t *testing.T) {
	name, sum := strings.Repeat("a1", 16), strings.Repeat("0f", 32)
	head := "coffer-packlist 1\nsequence 3\n"
	for _, c := range []struct{ text, want string }{
		{"", "not a pack list"},
		{"coffer-packlist 2\nsequence 0\n", "not a pack list"},
		{"coffer-packlist 1\nsequence -1\n", "line 2"},
		{head + name + " 10 " + sum + " *\n", "line 3"},
		{head + strings.ToUpper(name) + " 10 " + sum + " +\n", "not 32 lower-case hex"},
		{head + "../../other/key/aaaaaaaaaaaaaaaa 10 " + sum + " +\n", "not 32 lower-case hex"},
		{head + name + " 0 " + sum + " +\n", "not positive"},
		{head + name + " 10 - +\n", "has a SHA-256"},
		{head + name + " 10 " + sum[1:] + " -\n", "not 64 lower-case hex"},
		{head + name + " 10 " + sum + " +\n" + name + " 10 " + sum + " -\n", "listed twice"},
		{head + name + " 10 " + sum + " + extra\n", "line 3"},
		{head + strings.Repeat("x", 5000) + "\n", "longer than 4096"},
	} {
		_, err := ParsePackList(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePackList(%.60q) = %v; want an error saying %q", c.text, err, c.want)
		}
	}
}
