// Package keyscmd is kpreload keys: the module signing key of a cache
// (builder/modkey) shown, exported for Secure Boot's MOK enrolment, and
// rotated.
package keyscmd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// keyJSON is what `kpreload keys show --json` prints.
type keyJSON struct {
	Dir       string   `json:"dir"`
	Key       string   `json:"key"`
	Cert      string   `json:"cert"`
	CertPEM   string   `json:"cert_pem"`
	Subject   string   `json:"subject"`
	SigKey    string   `json:"sig_key"`
	SHA256    string   `json:"sha256"`
	NotBefore string   `json:"not_before"`
	NotAfter  string   `json:"not_after"`
	Enroll    []string `json:"enroll"`
}

func keyInfo(k *modkey.Key) keyJSON {
	sum := sha256.Sum256(k.Certificate.Raw)
	return keyJSON{Dir: k.Dir, Key: k.Key, Cert: k.Cert, CertPEM: k.CertPEM, Subject: k.Certificate.Subject.CommonName,
		SigKey: k.SigKey(), SHA256: hex.EncodeToString(sum[:]), NotBefore: k.Certificate.NotBefore.Format("2006-01-02"),
		NotAfter: k.Certificate.NotAfter.Format("2006-01-02"), Enroll: k.Enroll()}
}

// loadKey reads the cache's key, saying how one is made when there is none.
func loadKey(cache string) (*modkey.Key, error) {
	k, err := modkey.Load(cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no module signing key in %s yet: kpreload image build --secure-boot makes one when no recipe names a key (or kpreload keys rotate --cache %s)", modkey.Dir(cache), cache)
	}
	return k, err
}

// New builds kpreload keys and its subcommands.
func New() *cobra.Command {
	var cache string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "The module signing key kpreload makes for Secure Boot: show, export, rotate",
		Long: `kpreload image build --secure-boot signs the drivers' modules with a key of
their recipes (signing: key and cert) or, where no recipe names one, with the
module cache's own key, made on first use as Debian's DKMS makes its Machine
Owner Key: <cache>/` + modkey.DirName + `/, the private key ` + modkey.KeyName + ` (mode 0600,
never put in an image), the certificate ` + modkey.CertName + ` (DER) and ` + modkey.CertPEMName + ` (PEM).
Every later build and cell reuses it.

show tells where the key is and what to enroll; export writes the certificate
(never the private key) for mokutil --import or a cloud's UEFI signature
database; rotate makes a new key, keeps the old one retired beside it, and
signs every cell the old key signed again with the new one, under the cache
key a build with the new key computes (images made before keep the old
certificate: enroll the new one where they are rebuilt).`,
		Example: `  kpreload keys show --cache cache`,
	}
	cmd.PersistentFlags().StringVar(&cache, "cache", cmdenv.CacheDefaultDir(), "module cache directory the key is kept with")

	cmd.AddCommand(newKeysShowCmd(&cache), newKeysExportCmd(&cache), newKeysRotateCmd(&cache))
	return cmd
}

// newKeysShowCmd is kpreload keys show, of the key kept with *cache.
func newKeysShowCmd(cache *string) *cobra.Command {
	var asJSON bool
	show := &cobra.Command{
		Use:     "show [--json]",
		Short:   "Where the module signing key is and what to enroll",
		Example: "  kpreload keys show --cache cache\n  kpreload keys show --cache cache --json",
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKey(*cache)
			if err != nil {
				return err
			}
			if asJSON {
				return cmdout.PrintJSON(cmd.OutOrStdout(), keyInfo(k))
			}
			printKey(cmd.OutOrStdout(), keyInfo(k))
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the key as JSON")
	return show
}

// keysExportCommand is kpreload keys export: its options, as the flags
// set them.
type keysExportCommand struct {
	cache       *string
	out, format string
}

// newKeysExportCmd is kpreload keys export, of the key kept with *cache.
func newKeysExportCmd(cache *string) *cobra.Command {
	m := &keysExportCommand{cache: cache}
	export := &cobra.Command{
		Use:     "export -o FILE [--format der|pem]",
		Short:   "Write the module signing certificate (never the private key)",
		Example: "  kpreload keys export --cache cache -o mok.der\n  kpreload keys export --cache cache --format pem -o mok.pem",
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(); err != nil {
				return err
			}
			return m.run(cmd.OutOrStdout())
		},
	}
	export.Flags().StringVarP(&m.out, "output", "o", "", "file to write the certificate to")
	export.Flags().StringVar(&m.format, "format", "der", "der (mokutil, GCE) or pem")
	return export
}

// validate checks the flags.
func (m *keysExportCommand) validate() error {
	if m.out == "" {
		return errors.New("-o FILE is required")
	}
	if m.format != "der" && m.format != "pem" {
		return fmt.Errorf("--format %q: want der or pem", m.format)
	}
	return nil
}

// run writes the certificate and says what to enroll on w.
func (m *keysExportCommand) run(w io.Writer) error {
	k, err := loadKey(*m.cache)
	if err != nil {
		return err
	}
	// The certificate as loaded (read bounded, regular files only), never
	// the files read again.
	data := k.Certificate.Raw
	if m.format == "pem" {
		data = k.PEM()
	}
	if err := fileutil.WriteAtomic(m.out, data, 0o644, false); err != nil {
		return fmt.Errorf("export the module signing certificate: %w", err)
	}
	fmt.Fprintf(w, "%s: certificate %q (sig_key %s); enroll it with mokutil --import %s\n", m.out, k.Certificate.Subject.CommonName, k.SigKey(), m.out)
	return nil
}

// keysRotateCommand is kpreload keys rotate: its options, as the flags
// set them.
type keysRotateCommand struct {
	cache     *string
	downloads string
	asJSON    bool
}

// newKeysRotateCmd is kpreload keys rotate, of the key kept with *cache.
func newKeysRotateCmd(cache *string) *cobra.Command {
	m := &keysRotateCommand{cache: cache}
	rotate := &cobra.Command{
		Use:     "rotate [--json]",
		Short:   "Make a new module signing key and sign the old key's cells again with it",
		Example: "  kpreload keys rotate --cache cache",
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return m.run(cmd)
		},
	}
	rotate.Flags().StringVar(&m.downloads, "downloads", image.DefaultDownloadDir(), "where the unpacked kernels (their sign-file) are")
	rotate.Flags().BoolVar(&m.asJSON, "json", false, "print the new key and the cells re-signed as JSON")
	return rotate
}

// run rotates the key and signs the old key's cells again.
func (m *keysRotateCommand) run(cmd *cobra.Command) error {
	cache := *m.cache
	old, cur, err := modkey.Rotate(cache)
	if err != nil {
		return err
	}
	var done []modkey.Resigned
	if old != nil {
		st, err := store.Open(cache)
		if err != nil {
			return err
		}
		signFile := func(kernel string) (string, error) {
			return dkms.SignFile(filepath.Join(m.downloads, "kernels", kernel, "usr", "src", "linux-headers-"+kernel))
		}
		if done, err = modkey.Resign(cmd.Context(), st, old, cur, signFile); err != nil {
			return fmt.Errorf("the new key is in place, the old one in %s; %d cell(s) re-signed before: %w", old.Dir, len(done), err)
		}
	}
	if m.asJSON {
		res := struct {
			Key      keyJSON           `json:"key"`
			Retired  string            `json:"retired,omitempty"`
			Resigned []modkey.Resigned `json:"resigned"`
		}{Key: keyInfo(cur), Resigned: done}
		if old != nil {
			res.Retired = old.Dir
		}
		if res.Resigned == nil {
			res.Resigned = []modkey.Resigned{}
		}
		return cmdout.PrintJSON(cmd.OutOrStdout(), res)
	}
	printRotation(cmd.OutOrStdout(), old, cur, done)
	return nil
}

// printRotation says what a rotation did: the key retired (old, nil when
// there was none), the cells re-signed (done), the new key (cur).
func printRotation(w io.Writer, old, cur *modkey.Key, done []modkey.Resigned) {
	if old == nil {
		fmt.Fprintf(w, "no key yet: made one\n")
	} else {
		fmt.Fprintf(w, "retired the key with sig_key %s into %s\n", old.SigKey(), old.Dir)
	}
	for _, r := range done {
		fmt.Fprintf(w, "re-signed %s %s %s for %s: set %.12s -> %.12s\n", r.Driver, r.Version, r.Flavor, r.Kernel, r.From, r.To)
	}
	fmt.Fprintf(w, "%d cell(s) re-signed\n", len(done))
	printKey(w, keyInfo(cur))
}

// printKey writes a key's files and what to enroll.
func printKey(w io.Writer, k keyJSON) {
	fmt.Fprintf(w, "module signing key %q, sig_key %s, valid %s to %s\n", k.Subject, k.SigKey, k.NotBefore, k.NotAfter)
	fmt.Fprintf(w, "  private key  %s (mode 0600; stays here)\n", k.Key)
	fmt.Fprintf(w, "  certificate  %s (DER), %s (PEM), sha256 %s\n", k.Cert, k.CertPEM, k.SHA256)
	fmt.Fprintf(w, "enroll it as a Machine Owner Key:\n")
	for _, e := range k.Enroll {
		fmt.Fprintf(w, "  %s\n", e)
	}
}
