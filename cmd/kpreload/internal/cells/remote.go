package cells

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

// RemoteFlags are the flags that name a remote cache and bound the calls to it.
type RemoteFlags struct {
	url          string
	plainHTTP    bool
	dockerConfig string
	timeouts     remote.Timeouts
	sign         string
	trust        []string
}

// Register adds the registry flags to f: --remote, --plain-http,
// --docker-config, the timeouts, --sign and --trust.
func (rf *RemoteFlags) Register(f *pflag.FlagSet) {
	f.StringVar(&rf.url, "remote", "", "remote module cache: an OCI registry repository, oci://HOST[:PORT]/REPO")
	f.BoolVar(&rf.plainHTTP, "plain-http", false, "talk HTTP, not HTTPS, to the --remote registry (a local registry only)")
	f.StringVar(&rf.dockerConfig, "docker-config", "", "Docker config file with the registry's credentials (default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json)")
	f.DurationVar(&rf.timeouts.Total, "timeout", remote.DefaultTimeout, "with --remote: the most one registry operation may take (a lookup, the listing, the pull or the push of one cell)")
	f.DurationVar(&rf.timeouts.Connect, "connect-timeout", remote.DefaultConnectTimeout, "with --remote: the most connecting to the registry may take (TCP and TLS)")
	f.DurationVar(&rf.timeouts.FirstByte, "first-byte-timeout", remote.DefaultFirstByteTimeout, "with --remote: the most the registry may take to start answering a request")
	f.DurationVar(&rf.timeouts.Idle, "idle-timeout", remote.DefaultIdleTimeout, "with --remote: the most a download may go without a byte from the registry")
	f.StringVar(&rf.sign, "sign", "", "with --remote: sign every cell pushed with this Ed25519 private key (PEM; kpreload cache keygen, or openssl genpkey -algorithm ed25519)")
	f.StringArrayVar(&rf.trust, "trust", nil, "with --remote: take only cells signed by this Ed25519 public key (PEM; repeatable): unsigned and foreign-signed cells are refused")
}

// ImageTrust refuses a registry an image's drivers would come from
// unsigned: --remote needs --trust unless allowUnsigned (--allow-unsigned)
// says so on purpose.
func (rf *RemoteFlags) ImageTrust(allowUnsigned bool) error {
	switch {
	case rf.url == "" && allowUnsigned:
		return errors.New("--allow-unsigned needs --remote")
	case rf.url != "" && len(rf.trust) == 0 && !allowUnsigned:
		return fmt.Errorf("--remote %s without --trust: the image's drivers would be taken from the registry unsigned; give the builders' public keys with --trust KEY.pub (repeatable), or --allow-unsigned to take unsigned cells on purpose", rf.url)
	}
	return nil
}

// Require is open for commands that cannot do without a remote.
func (rf *RemoteFlags) Require(what string) (*remote.Remote, error) {
	rm, err := rf.Open()
	if err == nil && rm == nil {
		err = fmt.Errorf("%s: give --remote oci://HOST[:PORT]/REPO", what)
	}
	return rm, err
}

// Open returns the remote the flags name, or nil when --remote is not given.
func (rf *RemoteFlags) Open() (*remote.Remote, error) {
	if rf.url == "" {
		if rf.plainHTTP || rf.sign != "" || len(rf.trust) > 0 {
			return nil, errors.New("--plain-http, --sign and --trust need --remote")
		}
		return nil, nil
	}
	for _, t := range []struct {
		flag string
		d    time.Duration
	}{{"timeout", rf.timeouts.Total}, {"connect-timeout", rf.timeouts.Connect}, {"first-byte-timeout", rf.timeouts.FirstByte}, {"idle-timeout", rf.timeouts.Idle}} {
		if t.d <= 0 {
			return nil, fmt.Errorf("--%s %s: want a positive duration", t.flag, t.d)
		}
	}
	o := remote.Options{PlainHTTP: rf.plainHTTP, DockerConfig: rf.dockerConfig, Timeouts: rf.timeouts, StallBeforeManifest: cmdenv.StallBeforeManifest()}
	if o.DockerConfig == "" {
		o.DockerConfig = cmdenv.DockerConfig()
	}
	if rf.sign != "" {
		s, err := cellsign.LoadSigner(rf.sign)
		if err != nil {
			return nil, fmt.Errorf("--sign: %w", err)
		}
		o.Signer = s
	}
	if len(rf.trust) > 0 {
		t, err := cellsign.LoadTrust(rf.trust...)
		if err != nil {
			return nil, fmt.Errorf("--trust: %w", err)
		}
		o.Trust = t
	}
	return remote.Open(rf.url, o)
}

// TrustNote says, for a cell taken from a registry, that its signature was
// not checked ("" when it was): trust is its remote.Record.Trust, signer
// the key id its annotations name.
func TrustNote(trust, signer string) string {
	switch trust {
	case remote.TrustUnsigned:
		return "unsigned: taken without --trust (its blobs and modules checked, not who made it)"
	case remote.TrustUnverified:
		return fmt.Sprintf("signed by %.40s, not verified: taken without --trust (its blobs and modules checked, not who made it)", signer)
	}
	return ""
}

// PrintRemoteReport prints the matrix the registry holds: one row per cell
// (recipe, or driver version flavour) and kernel, the newest record of each
// (older keys counted as superseded), then every failure with its first
// error. names, if given, keeps only those recipes.
func PrintRemoteReport(ctx context.Context, w io.Writer, rm *remote.Remote, names []string, asJSON bool) error {
	recs, refused, err := rm.List(ctx)
	if err != nil {
		return err
	}
	var newest []*remote.Record
	older := map[[2]string]int{}
	for _, rec := range recs {
		if len(names) > 0 && !slices.Contains(names, rec.Recipe) {
			continue
		}
		k := [2]string{rec.Cell(), rec.Kernel}
		if older[k]++; older[k] == 1 {
			newest = append(newest, rec) // List sorts newest first within a cell
		}
	}
	if asJSON {
		if newest == nil {
			newest = []*remote.Record{}
		}
		return cmdout.PrintJSON(w, newest)
	}
	tab := matrix.Table{Corner: "CELL"}
	for _, rec := range newest {
		s := rec.State
		if rec.Trust != remote.TrustVerified {
			s += ", " + rec.Trust
		}
		if n := older[[2]string{rec.Cell(), rec.Kernel}] - 1; n > 0 {
			s += fmt.Sprintf(" (+%d superseded)", n)
		}
		tab.Set(rec.Cell(), rec.Kernel, s)
	}
	tab.SortColumns()
	fmt.Fprintf(w, "registry %s: %d cells\n", rm, len(newest))
	if !rm.Trusting() {
		fmt.Fprintf(w, "no --trust: every cell below is unsigned or its signature unchecked\n")
	}
	fmt.Fprintln(w)
	tab.Write(w)
	for _, rec := range newest {
		if rec.State == remote.StateFailed {
			fmt.Fprintf(w, "\nFAILED %s for %s (key %.12s, %s):\n  %s\n", rec.Cell(), rec.Kernel, rec.Tag, rec.Created.Format("2006-01-02 15:04 MST"), rec.FirstError)
		}
	}
	if len(refused) > 0 && len(names) == 0 {
		fmt.Fprintf(w, "\nREFUSED %d tag(s) that are no readable cell:\n", len(refused))
		for _, f := range refused {
			fmt.Fprintf(w, "  %s\n", f.Err)
		}
	}
	return nil
}

// URL is the --remote the flags name, "" when none.
func (rf *RemoteFlags) URL() string { return rf.url }

// SignKey is the --sign private key file, "" when none.
func (rf *RemoteFlags) SignKey() string { return rf.sign }
