package cachecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

func newCachePushCmd(open func() (*store.Store, error)) *cobra.Command {
	var (
		rf     cells.RemoteFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "push --remote oci://HOST[:PORT]/REPO [--plain-http] [SET...]",
		Short: "Push cache sets to an OCI registry, one artifact per cell",
		Long: `Push uploads sets of the local cache (every set, or the SET ids or prefixes
given) to the registry repository --remote, one OCI artifact per cell tagged
by the set's cache key (sets made by kpreload build have one; a set added by
hand without a key cannot be pushed). Cells the registry already holds are not
uploaded again. Blobs go first and the manifest last, so a push killed midway
leaves nothing a pull would take as complete.

Credentials come from the Docker config (docker login, oras login, credential
helpers); --plain-http only for a registry without TLS. --timeout bounds the
push of each cell, --connect-timeout, --first-byte-timeout and --idle-timeout
each request.`,
		Example: `  kpreload cache push --cache ./cache --remote oci://127.0.0.1:5055/team --plain-http --sign team.key`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := clirun.SignalContext(cmd)
			defer stop()
			rm, err := rf.Require("push")
			if err != nil {
				return err
			}
			st, err := open()
			if err != nil {
				return err
			}
			ids, err := setIDs(st, args)
			if err != nil {
				return err
			}
			var out []*remote.Record
			var errs []error
			for _, id := range ids {
				res, err := rm.PushSet(ctx, st, id, "")
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, res.Record)
				if !asJSON {
					state := "present"
					if res.Pushed {
						state = fmt.Sprintf("pushed (%d blobs, %s)", res.Blobs, cacheHumanSize(res.Bytes))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s for %s (set %.12s): %s\n", res.Record.Driver, res.Record.Version, res.Record.Flavor, res.Record.Kernel, id, state)
				}
			}
			if asJSON {
				if err := cmdout.PrintJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	rf.Register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the pushed records as JSON")
	return cmd
}

// setIDs resolves set arguments (ids or prefixes), or lists every set.
func setIDs(st *store.Store, args []string) ([]string, error) {
	if len(args) > 0 {
		var ids []string
		for _, a := range args {
			id, err := st.Resolve(a)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
	entries, err := st.List()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.ID)
	}
	return ids, nil
}

// cachePullCommand is kpreload cache pull: its options, as the flags set
// them, and the local cache it pulls into.
type cachePullCommand struct {
	open                    func() (*store.Store, error)
	rf                      cells.RemoteFlags
	kernels                 []string
	driver, version, flavor string
	asJSON, replace         bool
}

func newCachePullCmd(open func() (*store.Store, error)) *cobra.Command {
	return (&cachePullCommand{open: open}).build()
}

// build makes the command: its help and its flags.
func (m *cachePullCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pull --remote oci://HOST[:PORT]/REPO [--trust KEY.pub]... [--kernel K]... [--driver D] [--version V] [--flavor F] [--replace] [KEY...]",
		Short: "Pull cells from an OCI registry into the local cache",
		Long: `Pull downloads the cells the registry repository --remote holds (every built
cell, those matching --kernel/--driver/--version/--flavor, or the cells
tagged KEY: a cache key id, as kpreload build --json prints) into the local
cache. Every blob is checked against its digest while it downloads and the
set against its manifest: a corrupt or truncated blob is refused with an
error naming the cell, and nothing of that cell enters the local cache.

Nothing the registry sends is trusted: a blob is read up to the size its
descriptor declares, a module up to what the cell's set manifest declares,
each blob once; redirects and tag-list pages are bounded; every request has
a connect, a first-byte and an idle timeout (--connect-timeout,
--first-byte-timeout, --idle-timeout) and the pull of each cell a total one
(--timeout). Downloads go to a temporary directory inside the cache, removed
however the pull ends (one a killed pull left is removed by the next pull or
by cache verify --repair). A tag that is not a readable cell (another
artifact under a key-like tag, a manifest that does not parse) and a cell
that fails to pull are skipped, the other cells pulled, and the exit status
is non-zero with a summary naming each refused cell and why.

A set's metadata is read again from its module files (aliases, srcversion,
dependencies, signature, firmware ...) and must be what its set.json says.
With --trust (an Ed25519 public key; repeatable) only cells signed by one of
those keys (kpreload build --remote --sign, cache push --sign) are taken:
an unsigned cell, one signed by another key, one signed in the old format,
or one whose set or names were changed after signing is refused, naming the
key; what names and orders a cell (driver, version, flavour, kernel, recipe,
creation time, generation) is read from its signed statement only. Without
--trust every cell pulled is reported on stderr as unsigned (or not
verified), and --json says "trust": "unsigned" or "unverified".

Without KEY arguments, the newest cell (the highest signed generation) of
each driver, version, flavour and kernel is pulled. With --trust the cache
remembers the newest generation it has seen of each; a registry that offers
an older one, or none, is refused for that cell, naming both generations
(remove remote-generations.json in the cache to forget them). A pulled cell
never replaces a set of the same driver, version and flavour for that
kernel already in the local cache (built here, say) unless --replace.

To pull exactly the cells an image or a build needs (by their content keys),
use kpreload build --remote ... --pull-only, or kpreload image build --remote.`,
		Example: `  kpreload cache pull --cache ./cache --remote oci://127.0.0.1:5055/team --plain-http --trust team.pub`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return m.run(cmd, args)
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *cachePullCommand) flags(cmd *cobra.Command) {
	rf := &m.rf
	f := cmd.Flags()
	rf.Register(f)
	f.StringArrayVar(&m.kernels, "kernel", nil, "only cells for this kernel release (repeatable)")
	f.StringVar(&m.driver, "driver", "", "only cells of this driver")
	f.StringVar(&m.version, "version", "", "only cells of this driver version, matched as the instance YAML matches it: 550.54.14 that version, 550 or 550.54 every version of that branch or prefix, latest every version")
	f.StringVar(&m.flavor, "flavor", "", "only cells of this flavour")
	f.BoolVar(&m.asJSON, "json", false, "print what was pulled as JSON")
	f.BoolVar(&m.replace, "replace", false, "let a pulled cell replace a local set of the same driver, version and flavour for its kernel")
}

// run pulls the cells asked for: those tagged keys, else the newest of
// each identity the flags narrow to.
func (m *cachePullCommand) run(cmd *cobra.Command, keys []string) error {
	ctx, stop := clirun.SignalContext(cmd)
	defer stop()
	rm, err := m.rf.Require("pull")
	if err != nil {
		return err
	}
	st, err := m.open()
	if err != nil {
		return err
	}
	want, refused, err := m.selectCells(ctx, cmd.ErrOrStderr(), rm, st, keys)
	if err != nil {
		return err
	}
	type pulled struct {
		*remote.Record
		LocalSet string `json:"local_set"`
		Bytes    int64  `json:"bytes"`
	}
	out := []pulled{}
	for _, rec := range want {
		if ctx.Err() != nil {
			break
		}
		res, err := rm.PullRecord(ctx, st, rec, m.replace)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		if note := cells.TrustNote(rec.Trust, rec.Signer); note != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "kpreload: pull: %s for %s (key %.12s): %s\n", rec.Cell(), rec.Kernel, rec.Tag, note)
		}
		out = append(out, pulled{rec, res.SetID, res.Bytes})
		if !m.asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s for %s: pulled set %.12s (%s)\n", rec.Driver, rec.Version, rec.Flavor, rec.Kernel, res.SetID, cacheHumanSize(res.Bytes))
		}
	}
	if m.asJSON {
		if err := cmdout.PrintJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pull from %s: interrupted after %d of %d cells: %w", rm, len(out), len(want), err)
	}
	return pullSummary(rm, len(out), refused)
}

// selectCells lists rm and picks the cells to pull: those tagged keys,
// else the newest cell of each driver, version, flavour and kernel the
// flags ask for (remote.Filter, the version read as the instance YAML
// reads it), refusing one older than st has seen. refused are the cells
// and tags refused; a tag that is no readable cell is refused when the
// pull is of the whole repository or names its key, and only warned about
// on w when the flags narrow the pull (it cannot tell whether the tag is
// one of those).
func (m *cachePullCommand) selectCells(ctx context.Context, w io.Writer, rm *remote.Remote, st *store.Store, keys []string) (want []*remote.Record, refused []error, err error) {
	recs, refusedTags, err := rm.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	filter := remote.Filter{Kernels: m.kernels, Driver: m.driver, Version: m.version, Flavor: m.flavor, VersionRule: selection.MatchVersion}
	narrowed := len(m.kernels) > 0 || m.driver != "" || m.version != "" || m.flavor != ""
	named := func(tag string) bool {
		return slices.ContainsFunc(keys, func(a string) bool { return strings.HasPrefix(tag, a) })
	}
	for _, f := range refusedTags {
		switch {
		case len(keys) > 0:
			if named(f.Tag) {
				refused = append(refused, f.Err)
			}
		case narrowed:
			fmt.Fprintf(w, "kpreload: pull: skipped, not a readable cell: %v\n", f.Err)
		default:
			refused = append(refused, f.Err)
		}
	}
	if len(keys) > 0 {
		// Cells named by their keys: exactly those.
		for _, rec := range recs {
			if rec.State == remote.StateOK && named(rec.Tag) {
				want = append(want, rec)
			}
		}
	} else {
		var rollbacks []error
		if want, rollbacks, err = rm.Select(st, recs, filter.Match); err != nil {
			return nil, nil, err
		}
		refused = append(refused, rollbacks...)
	}
	if len(want) == 0 && len(refused) == 0 {
		return nil, nil, fmt.Errorf("pull: %s holds no built cell matching the request (%d records in all; kpreload build --report --remote %s lists them)", rm, len(recs), rm)
	}
	return want, refused, nil
}

// pullSummary is the error of a pull that refused cells, naming each (the
// errors do) and why; nil when none was refused.
func pullSummary(rm *remote.Remote, pulled int, refused []error) error {
	if len(refused) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pull from %s: %d cell(s) pulled, %d refused:", rm, pulled, len(refused))
	for _, err := range refused {
		fmt.Fprintf(&b, "\n  %v", err)
	}
	return errors.New(b.String())
}
