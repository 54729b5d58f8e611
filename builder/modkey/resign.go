package modkey

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modsig"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// SigningKeyEntry is the cache key entry naming the certificate a cell is
// signed with ("sha256:<hex of its DER> <hash>", as builder/matrix writes it).
const SigningKeyEntry = "signing_key"

// Resigned is one cell rotation moved to the new key.
type Resigned struct {
	Kernel, Driver, Version, Flavor string
	// From and To are the set ids before and after.
	From, To string
}

// Resign signs again, with cur, every cell of st that old signed (its cache
// key's signing_key names old's certificate), and stores it under the cache
// key a build with cur computes, replacing the old cell: a later build or
// image finds it without compiling. signFile returns the kernel's sign-file
// for a kernel release. Cells signed with other keys are left alone.
func Resign(ctx context.Context, st *store.Store, old, cur *Key, signFile func(kernel string) (string, error)) ([]Resigned, error) {
	oldID, err := dkms.CertID(old.Cert)
	if err != nil {
		return nil, err
	}
	curID, err := dkms.CertID(cur.Cert)
	if err != nil {
		return nil, err
	}
	entries, err := st.List()
	if err != nil {
		return nil, fmt.Errorf("re-sign cells: %w", err)
	}
	tmp, err := os.MkdirTemp("", "kpreload-resign-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var done []Resigned
	for _, e := range entries {
		m, err := st.Get(e.ID)
		if err != nil {
			return done, fmt.Errorf("re-sign cells: %w", err)
		}
		id, hash, _ := strings.Cut(m.CacheKey[SigningKeyEntry], " ")
		if id != oldID || hash == "" {
			continue
		}
		sf, err := signFile(m.Kernel)
		if err != nil {
			return done, fmt.Errorf("re-sign %s %s for %s: %w", m.Driver, m.Version, m.Kernel, err)
		}
		dir := filepath.Join(tmp, e.ID)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return done, err
		}
		var files []string
		for _, mod := range m.Modules {
			data, err := inroot.ReadPath(st.ObjectPath(mod.SHA256), mod.Size)
			if err != nil {
				return done, fmt.Errorf("re-sign %s: %w", mod.File, err)
			}
			plain, err := stripSignature(data)
			if err != nil {
				return done, fmt.Errorf("re-sign %s of set %s: %w", mod.File, e.ID, err)
			}
			f := filepath.Join(dir, filepath.Base(mod.File))
			if err := os.WriteFile(f, plain, 0o644); err != nil {
				return done, err
			}
			if err := dkms.Sign(ctx, dkms.SignRequest{SignFile: sf, Hash: hash, Key: cur.Key, Cert: cur.Cert, Module: f}); err != nil {
				return done, err
			}
			files = append(files, f)
		}
		key := make(map[string]string, len(m.CacheKey))
		for k, v := range m.CacheKey {
			key[k] = v
		}
		key[SigningKeyEntry] = curID + " " + hash
		req := store.AddRequest{Driver: m.Driver, Version: m.Version, Flavor: m.Flavor, Files: files, CacheKey: key, Replace: true}
		if g := m.SupportedGPUs; g != nil {
			req.SupportedGPUs = st.ObjectPath(g.SHA256)
		}
		_, to, err := st.AddFiles(ctx, req)
		if err != nil {
			return done, fmt.Errorf("re-sign %s %s for %s: %w", m.Driver, m.Version, m.Kernel, err)
		}
		done = append(done, Resigned{Kernel: m.Kernel, Driver: m.Driver, Version: m.Version, Flavor: m.Flavor, From: e.ID, To: to})
	}
	return done, nil
}

// stripSignature returns a signed module's bytes without its appended
// signature (the PKCS #7 blob, struct module_signature and the magic).
func stripSignature(data []byte) ([]byte, error) {
	if !bytes.HasSuffix(data, []byte(modsig.Magic)) {
		return nil, errors.New("the module is not signed")
	}
	rest := data[:len(data)-len(modsig.Magic)]
	const infoSize = 12
	if len(rest) < infoSize {
		return nil, errors.New("module signature truncated")
	}
	sigLen := int(binary.BigEndian.Uint32(rest[len(rest)-4:]))
	rest = rest[:len(rest)-infoSize]
	if sigLen <= 0 || sigLen > len(rest) {
		return nil, fmt.Errorf("module signature length %d does not fit the file", sigLen)
	}
	return rest[:len(rest)-sigLen], nil
}
