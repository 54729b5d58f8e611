// Package cachecmd is kpreload cache: the content-addressed module cache (add,
// ls, verify, index, rm, keygen) and its registry (push, pull).
package cachecmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// New builds kpreload cache and its subcommands.
func New() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Manage the content-addressed module cache",
		Long: `The module cache holds precompiled kernel modules by content (sha256), a
manifest per module set (one driver version built for one kernel), and one boot
index per kernel release that /init reads.

The cache directory is --cache, else $KPRELOAD_CACHE_DIR, else ` + store.DefaultDir + `.`,
		Example: `  kpreload cache ls --cache ./cache`,
	}
	cmd.PersistentFlags().StringVar(&dir, "cache", cmdenv.CacheDefaultDir(), "module cache directory")
	open := func() (*store.Store, error) { return store.Open(dir) }
	cmd.AddCommand(newCacheAddCmd(open), newCacheLsCmd(open), newCacheVerifyCmd(open), newCacheIndexCmd(open), newCacheRmCmd(open),
		newCachePushCmd(open), newCachePullCmd(open), newCacheKeygenCmd())
	return cmd
}

func newCacheAddCmd(open func() (*store.Store, error)) *cobra.Command {
	var req store.AddRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "add --driver NAME --version V [--flavor F] FILE.ko...",
		Annotations: map[string]string{mistakes.ArgsNote: "the module files to add"},
		Short:       "Add a set of module files built for one kernel",
		Long: `Add reads every module file (.ko, .ko.xz, .ko.zst, .ko.gz), checks that they
were all built for one kernel (same vermagic), stores them by content, writes
the set's manifest and regenerates that kernel's boot index. It prints the set
id; adding the same files again gives the same id and changes nothing.`,
		Example: `  sudo kpreload cache add --driver testdriver --version 1.0 testdriver.ko`,
		Args:    mistakes.MinArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := errors.Join(names.Check("--driver", req.Driver), names.Check("--version", req.Version), mistakes.CheckNames("--flavor", req.Flavor)); err != nil {
				return fmt.Errorf("cache add: %w", err)
			}
			s, err := open()
			if err != nil {
				return err
			}
			req.Files = args
			m, id, err := s.AddFiles(clirun.Context(cmd), req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return cmdout.PrintJSON(w, struct {
					ID       string             `json:"id"`
					Manifest *manifest.Manifest `json:"manifest"`
				}{id, m})
			}
			return cachePrintSummary(w, id, m)
		},
	}
	cmd.Flags().StringVar(&req.Driver, "driver", "", "driver name (required)")
	cmd.Flags().StringVar(&req.Version, "version", "", "driver version (required)")
	cmd.Flags().StringVar(&req.Flavor, "flavor", "", "driver flavor (open, proprietary, ...)")
	cmd.Flags().StringToStringVar(&req.CacheKey, "key", nil, "build cache key entries, NAME=VALUE (repeatable)")
	cmd.Flags().StringVar(&req.KernelTree, "kernel-tree", "", "lib/modules/<release> of the kernel: dependencies outside the set must be its modules or built-ins")
	cmd.Flags().BoolVar(&req.Replace, "replace", false, "supersede a set of the same driver, version and flavor for this kernel")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the id and manifest as JSON")
	cmd.MarkFlagRequired("driver")
	cmd.MarkFlagRequired("version")
	return cmd
}

// cachePrintSummary describes an added set.
func cachePrintSummary(w io.Writer, id string, m *manifest.Manifest) error {
	var names []string
	var size int64
	for _, mod := range m.Modules {
		names = append(names, mod.Name)
		size += mod.Size
	}
	driver := strings.TrimSpace(m.Driver + " " + m.Version + " " + m.Flavor)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "set\t%s\n", id)
	fmt.Fprintf(tw, "kernel\t%s\n", m.Kernel)
	fmt.Fprintf(tw, "driver\t%s\n", driver)
	fmt.Fprintf(tw, "modules\t%d (%s): %s\n", len(m.Modules), cacheHumanSize(size), strings.Join(names, ", "))
	if len(m.External) > 0 {
		fmt.Fprintf(tw, "needs\t%s (from the kernel)\n", strings.Join(m.External, ", "))
	}
	if len(m.Firmware) > 0 {
		fmt.Fprintf(tw, "firmware\t%s\n", strings.Join(m.Firmware, ", "))
	}
	return tw.Flush()
}

func newCacheLsCmd(open func() (*store.Store, error)) *cobra.Command {
	var kernel string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls [--kernel K]",
		Short:   "List the module sets in the cache",
		Example: `  kpreload cache ls --cache ./cache`,
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			all, listErr := s.List()
			entries := []store.Entry{}
			for _, e := range all {
				if kernel == "" || e.Kernel == kernel {
					entries = append(entries, e)
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if err := cmdout.PrintJSON(w, entries); err != nil {
					return err
				}
				return listErr
			}
			if err := writeCacheLs(w, entries); err != nil {
				return err
			}
			return listErr
		},
	}
	cmd.Flags().StringVar(&kernel, "kernel", "", "only sets for this kernel release")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sets as JSON")
	return cmd
}

// writeCacheLs prints cache ls's table. The names come from the cache's
// manifests (a registry's, pulled): shown escaped (termtext).
func writeCacheLs(w io.Writer, entries []store.Entry) error {
	tw := tabwriter.NewWriter(termtext.NewWriter(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SET\tKERNEL\tDRIVER\tVERSION\tFLAVOR\tMODULES\tSIZE")
	name := termtext.Name
	for _, e := range entries {
		flavor := e.Flavor
		if flavor == "" {
			flavor = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", name(e.ID[:min(12, len(e.ID))]), name(e.Kernel), name(e.Driver), name(e.Version), name(flavor), e.Modules, cacheHumanSize(e.Size))
	}
	return tw.Flush()
}

// cacheVerifyCommand is kpreload cache verify: its options, as the flags
// set them, and the cache it verifies.
type cacheVerifyCommand struct {
	open                func() (*store.Store, error)
	asJSON, repair      bool
	rebuild, recipesDir string
	recipeRefs          []string
}

func newCacheVerifyCmd(open func() (*store.Store, error)) *cobra.Command {
	return (&cacheVerifyCommand{open: open}).build()
}

// build makes the command: its help and its flags.
func (m *cacheVerifyCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify [--repair] | verify --rebuild SET|KEY [--recipe R]... [--json]",
		Short: "Re-hash every module file and check manifests and boot indexes, or rebuild a set and compare",
		Long: `Verify re-hashes every module file every manifest references and checks the
manifests, the boot indexes and the cache keys. It lists each problem and
exits non-zero if there is any.

--repair first cleans up after interrupted writers (temporary files, stale
boot indexes, dangling keys, unreferenced objects). It never deletes a set:
a corrupt or missing module file is fixed by adding its set again.

--rebuild SET|KEY builds the cell a stored set was made from again, with the
real dkms into a temporary cache, and compares every module byte for byte
with the stored one: a team's check of a registry's cells (cache pull them
first) against its own build. SET is a set id as "cache ls" prints it, KEY
a cache key digest (the name under the cache's keys/); a prefix of either
will do. The recipe is the one among --recipe (a file or a name in
--recipes), else among every recipe in --recipes, that gives the stored key
for the set's kernel; when none does (another compiler, other headers, a
changed source), it says which key entries differ. Builds run in dkms's
sandbox, so the same key gives the same bytes on any host; the exit status
is non-zero when they differ.

  kpreload cache verify --rebuild 0f5074e78eb6
  kpreload cache pull --remote oci://registry.example/kpreload && kpreload cache verify --rebuild ae3c39a1 --json`,
		Example: `  kpreload cache verify --cache ./cache --repair`,
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if m.rebuild != "" && m.repair {
				return fmt.Errorf("--rebuild and --repair: give one")
			}
			return m.run(cmd)
		},
	}
	cmd.Flags().BoolVar(&m.repair, "repair", false, "clean up after interrupted writers first")
	cmd.Flags().BoolVar(&m.asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&m.rebuild, "rebuild", "", "rebuild this set (id or cache key digest, or a prefix) and compare it byte for byte")
	cmd.Flags().StringArrayVar(&m.recipeRefs, "recipe", nil, "with --rebuild: the recipe (file or name) the set was built from (repeatable; default: every recipe in --recipes)")
	cmd.Flags().StringVar(&m.recipesDir, "recipes", "", "with --rebuild: directory of recipes"+cells.RecipesDefaultHelp)
	return cmd
}

// run rebuilds a set and compares it, or repairs (with --repair) and
// verifies the cache.
func (m *cacheVerifyCommand) run(cmd *cobra.Command) error {
	s, err := m.open()
	if err != nil {
		return err
	}
	if m.rebuild != "" {
		return runRebuild(cmd, s, m.rebuild, m.recipeRefs, m.recipesDir, m.asJSON)
	}
	ctx := clirun.Context(cmd)
	var rep *store.Repaired
	if m.repair {
		if rep, err = s.Repair(ctx); err != nil {
			return err
		}
	}
	probs, err := s.Verify(ctx)
	if err != nil {
		return err
	}
	if err := m.print(cmd.OutOrStdout(), s.Dir(), rep, probs); err != nil {
		return err
	}
	if len(probs) > 0 {
		return fmt.Errorf("verify %s: %d problem(s)", s.Dir(), len(probs))
	}
	return nil
}

// print writes what the repair did (rep, nil without one) and the problems
// verifying the cache dir found, as text or JSON.
func (m *cacheVerifyCommand) print(w io.Writer, dir string, rep *store.Repaired, probs []store.Problem) error {
	if m.asJSON {
		if probs == nil {
			probs = []store.Problem{}
		}
		return cmdout.PrintJSON(w, struct {
			OK       bool            `json:"ok"`
			Repaired *store.Repaired `json:"repaired,omitempty"`
			Problems []store.Problem `json:"problems"`
		}{len(probs) == 0, rep, probs})
	}
	if rep != nil {
		fmt.Fprintf(w, "repaired: %d temporary file(s), %d boot index(es), %d cache key(s), %d unused object(s) removed or rewritten\n",
			len(rep.TempFiles), len(rep.Indexes), len(rep.Keys), len(rep.Objects))
	}
	for _, p := range probs {
		fmt.Fprintln(w, p)
	}
	if len(probs) == 0 {
		fmt.Fprintf(w, "ok: %s\n", dir)
	}
	return nil
}

// runRebuild is cache verify --rebuild: matrix.Rebuild, printed.
func runRebuild(cmd *cobra.Command, s *store.Store, ref string, refs []string, dir string, asJSON bool) error {
	ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var candidates []*recipe.Recipe
	var err error
	if len(refs) > 0 {
		candidates, err = cells.LoadRecipes(refs, dir)
	} else if dir, err = cells.ResolveRecipesDir(dir); err != nil {
		err = fmt.Errorf("--rebuild looks for the set's recipe in --recipes: %w", err)
	} else if candidates, err = recipe.LoadDir(dir); err != nil {
		err = fmt.Errorf("--rebuild looks for the set's recipe in --recipes %s: %w", dir, err)
	}
	if err != nil {
		return err
	}
	p := cells.NewProgress(cmd.ErrOrStderr())
	res, err := matrix.Rebuild(ctx, s, ref, candidates, matrix.Options{Progress: p.Event, DownloadDir: cmdenv.DownloadDir()})
	p.Stop()
	if res == nil {
		return err
	}
	w := cmd.OutOrStdout()
	if asJSON {
		if jerr := cmdout.PrintJSON(w, res); jerr != nil {
			return jerr
		}
		return err
	}
	fmt.Fprintf(w, "set %.12s (key %.12s) for %s, rebuilt from %s:\n", res.Set, res.KeyID, res.Kernel, res.Recipe)
	for _, m := range res.Modules {
		if m.Identical {
			fmt.Fprintf(w, "  %-24s identical  sha256 %.12s, %d bytes\n", m.File, m.StoredSHA256, m.StoredSize)
			continue
		}
		fmt.Fprintf(w, "  %-24s DIFFERS    stored sha256 %.12s, %d bytes; rebuilt sha256 %.12s, %d bytes\n", m.File, m.StoredSHA256, m.StoredSize, m.RebuiltSHA256, m.RebuiltSize)
	}
	if res.Identical {
		fmt.Fprintf(w, "ok: the rebuild is identical, byte for byte (set %.12s)\n", res.RebuiltSet)
	}
	return err
}

func newCacheIndexCmd(open func() (*store.Store, error)) *cobra.Command {
	var kernel string
	cmd := &cobra.Command{
		Use:     "index --kernel K",
		Short:   "Print the boot index /init reads for a kernel release",
		Example: `  kpreload cache index --cache ./cache --kernel 6.1.0-56-cloud-amd64`,
		Args:    mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := names.Check("--kernel", kernel); err != nil {
				return fmt.Errorf("cache index: %w", err)
			}
			s, err := open()
			if err != nil {
				return err
			}
			ix, err := s.Index(kernel)
			if err != nil {
				return err
			}
			return cmdout.PrintJSON(cmd.OutOrStdout(), ix)
		},
	}
	cmd.Flags().StringVar(&kernel, "kernel", "", "kernel release (required)")
	cmd.MarkFlagRequired("kernel")
	return cmd
}

func newCacheRmCmd(open func() (*store.Store, error)) *cobra.Command {
	var sel store.Entry
	cmd := &cobra.Command{
		Use:         "rm SET... | rm [--kernel K] [--driver D] [--version V] [--flavor F]",
		Annotations: map[string]string{mistakes.ArgsNote: "the module sets to remove"},
		Short:       "Remove sets (by id or unique id prefix, or every set a selection matches) and the module files only they use",
		Long: `Rm removes module sets and the module files no other set uses, and
regenerates the boot indexes of their kernels. Name the sets by id, as "cache
ls" prints it (a unique prefix will do), or select them: --kernel, --driver,
--version and --flavor remove every set that matches all of those given (the
sets of a kernel no longer installed, or of a driver version no image
carries any more). A selection that matches no set is an error.`,
		Example: `  kpreload cache rm --cache ./cache --kernel 6.1.0-56-cloud-amd64 --driver kpreload-edu --version 1.0`,
		Args: func(cmd *cobra.Command, args []string) error {
			if sel == (store.Entry{}) {
				return mistakes.MinArgs(1)(cmd, args)
			}
			if len(args) > 0 {
				return fmt.Errorf("cache rm: give set ids or --kernel/--driver/--version/--flavor, not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := mistakes.CheckNames("--kernel", sel.Kernel, "--driver", sel.Driver, "--version", sel.Version, "--flavor", sel.Flavor); err != nil {
				return fmt.Errorf("cache rm: %w", err)
			}
			s, err := open()
			if err != nil {
				return err
			}
			ids := args
			if len(args) == 0 {
				if ids, err = selectSets(s, sel); err != nil {
					return err
				}
			}
			for _, a := range ids {
				id, err := s.Resolve(a)
				if err != nil {
					return err
				}
				if err := s.Remove(clirun.Context(cmd), id); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", id)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sel.Kernel, "kernel", "", "remove the sets built for this kernel release")
	f.StringVar(&sel.Driver, "driver", "", "remove the sets of this driver")
	f.StringVar(&sel.Version, "version", "", "remove the sets of this driver version")
	f.StringVar(&sel.Flavor, "flavor", "", "remove the sets of this flavor")
	return cmd
}

// selectSets returns the ids of the sets of s that match every non-empty
// field of sel among Kernel, Driver, Version and Flavor; none is an error.
func selectSets(s *store.Store, sel store.Entry) ([]string, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	match := func(want, got string) bool { return want == "" || want == got }
	var ids []string
	for _, e := range all {
		if match(sel.Kernel, e.Kernel) && match(sel.Driver, e.Driver) && match(sel.Version, e.Version) && match(sel.Flavor, e.Flavor) {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("cache rm: no set in %s matches (kpreload cache ls lists them)", s.Dir())
	}
	return ids, nil
}

// cacheHumanSize formats a byte count with a binary unit.
func cacheHumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
