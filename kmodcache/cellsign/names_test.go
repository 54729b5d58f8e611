package cellsign

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestVerifyRefusesOutsideNames: a statement signed by a trusted key whose
// driver, version, flavour or kernel is a value outside the name grammar
// (namestest's fixed and seeded random cases but "", which a statement may
// leave out) is refused by Verify, the statement's one reader: a signature
// does not make a path of a name.
func TestVerifyRefusesOutsideNames(t *testing.T) {
	dir := t.TempDir()
	signer, err := Generate(filepath.Join(dir, "key"), filepath.Join(dir, "key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	trust := signer.Trust()
	good := Statement{Key: "k1", State: "ok", Subject: "set1", Driver: "nvidia", Version: "535.261.03", Flavor: "open",
		Kernel: "6.1.0-56-cloud-amd64", Created: "2026-01-02T03:04:05Z", Generation: 7}
	if b, sig, err := signer.Sign(good); err != nil {
		t.Fatal(err)
	} else if _, err := trust.Verify(b, sig); err != nil {
		t.Fatalf("Verify of the good statement: %v", err)
	}
	fields := map[string]func(s *Statement) *string{
		"driver": func(s *Statement) *string { return &s.Driver }, "version": func(s *Statement) *string { return &s.Version },
		"flavor": func(s *Statement) *string { return &s.Flavor }, "kernel": func(s *Statement) *string { return &s.Kernel },
	}
	for _, c := range namestest.All(300) {
		if c.Value == "" {
			continue
		}
		for field, at := range fields {
			st := good
			*at(&st) = c.Value
			b, sig, err := signer.Sign(st)
			if err != nil {
				t.Fatal(err)
			}
			got, err := trust.Verify(b, sig)
			if !errors.Is(err, ErrBadStatement) || !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), field+" ") {
				t.Errorf("%s %s %.80q: Verify = %+v, %v; want the %s refused by the name grammar", c.Kind, field, c.Value, got, err, field)
			}
		}
	}
}
