package matrix

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/dkms"
	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/inroot"
)

// extras are a recipe's inputs beyond the DKMS source: the signing key and
// the supported-GPU list, prepared once per recipe and run.
type extras struct {
	// signKey and signCert are the resolved signing key and certificate
	// paths, signHash the digest; all "" when the recipe does not sign.
	signKey, signCert, signHash string
	// certID identifies the certificate (dkms.CertID) for the cache key.
	certID string
	// gpus is the uncompressed supported-gpus.json, "" when the recipe has none.
	gpus string
	// gpusDigest is the SHA-256 of gpus.
	gpusDigest string
}

// prepareExtras checks the recipe's signing key and certificate and
// fetches its supported-gpus.json into dir (created).
func prepareExtras(ctx context.Context, r *recipe.Recipe, downloads, dir string) (*extras, error) {
	x := &extras{}
	if s := r.Signing; s != nil {
		x.signKey, x.signCert, x.signHash = r.Path(s.Key), r.Path(s.Cert), s.Hash
		if x.signHash == "" {
			x.signHash = recipe.DefaultSignHash
		}
		if !strings.HasPrefix(x.signKey, "pkcs11:") {
			if _, err := os.Stat(x.signKey); err != nil {
				return nil, fmt.Errorf("recipe %s: signing.key: %w", r.Name, err)
			}
		}
		id, err := dkms.CertID(x.signCert)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: signing.cert: %w", r.Name, err)
		}
		x.certID = id
	}
	if g := r.SupportedGPUs; g != nil {
		path, digest, err := fetchSupportedGPUs(ctx, r, downloads, dir)
		if err != nil {
			return nil, err
		}
		x.gpus, x.gpusDigest = path, digest
	}
	return x, nil
}

// signingKey is the cache key's signing_key entry: "" for unsigned builds,
// else the certificate's id and the hash ("sha256:<hex> sha256").
func (x *extras) signingKey() string {
	if x.certID == "" {
		return ""
	}
	return x.certID + " " + x.signHash
}

// fetchSupportedGPUs unpacks the recipe's supported-gpus package (apt-get
// download + dpkg -x, cached under downloads like sources), reads the file,
// gunzips it when its name ends in .gz, checks that it is NVIDIA's format (a
// JSON object with a "chips" list) and writes it to dir/supported-gpus.json.
// It returns that path and the SHA-256 of the uncompressed bytes.
func fetchSupportedGPUs(ctx context.Context, r *recipe.Recipe, downloads, dir string) (string, string, error) {
	g := r.SupportedGPUs
	name, version, ok := recipe.SplitPackage(g.Package)
	if !ok {
		return "", "", fmt.Errorf("recipe %s: supported-gpus.package %q is not name=version", r.Name, g.Package)
	}
	root, err := unpackPackage(ctx, r, downloads, name, version)
	if err != nil {
		return "", "", fmt.Errorf("recipe %s: supported-gpus: %w", r.Name, err)
	}
	// Read inside the unpacked package: a link in it leads nowhere else.
	src := filepath.Join(root, g.Path)
	data, err := inroot.ReadFile(root, g.Path, inroot.MaxLarge)
	if err != nil {
		return "", "", fmt.Errorf("recipe %s: supported-gpus.path %s is not in %s: %w", r.Name, g.Path, g.Package, err)
	}
	if strings.HasSuffix(g.Path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return "", "", fmt.Errorf("recipe %s: supported-gpus %s: %w", r.Name, src, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return "", "", fmt.Errorf("recipe %s: supported-gpus %s: %w", r.Name, src, err)
		}
	}
	if _, err := checkSupportedGPUs(data, src); err != nil {
		return "", "", fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("recipe %s: supported-gpus: %w", r.Name, err)
	}
	out := filepath.Join(dir, "supported-gpus.json")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return "", "", fmt.Errorf("recipe %s: supported-gpus: %w", r.Name, err)
	}
	return out, sha256Hex(data), nil
}

// checkSupportedGPUs checks that data, read from src, is NVIDIA's
// supported-gpus.json (a JSON object with a "chips" list) and returns how
// many chips it lists.
func checkSupportedGPUs(data []byte, src string) (int, error) {
	var doc struct {
		Chips []json.RawMessage `json:"chips"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return 0, fmt.Errorf("supported-gpus %s is not JSON: %w", src, err)
	}
	if len(doc.Chips) == 0 {
		return 0, fmt.Errorf("supported-gpus %s has no \"chips\" list: not NVIDIA's supported-gpus.json", src)
	}
	return len(doc.Chips), nil
}

// sha256Hex is the SHA-256 of data in lowercase hex.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// signModules signs every file with the kernel's sign-file, in place,
// running it through run.
func signModules(ctx context.Context, run toolrun.Runner, x *extras, k *kernel, files []string) error {
	signFile, err := dkms.SignFile(k.headersDir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := dkms.Sign(ctx, dkms.SignRequest{SignFile: signFile, Hash: x.signHash, Key: x.signKey, Cert: x.signCert, Module: f, Runner: run}); err != nil {
			return err
		}
	}
	return nil
}
