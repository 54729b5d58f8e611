// Package buildcmd is kpreload build: the recipes × kernels matrix built into
// the module cache (builder/matrix), pulled from and pushed to a registry, and
// the registry's report.
package buildcmd

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/tiered"
)

// buildCommand is kpreload build: its options, as the flags set them.
type buildCommand struct {
	opts   matrix.Options
	cf     cells.Flags
	asJSON bool
	report bool
}

// New builds kpreload build.
func New() *cobra.Command { return (&buildCommand{}).build() }

// build makes the command: its help and its flags.
func (m *buildCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:         "build RECIPE[:KVER]... [--kernel KVER]... [--cache DIR] [--jobs N] [--remote oci://HOST/REPO] [--shard I/N] [--json]",
		Annotations: map[string]string{mistakes.ArgsNote: "the recipes to build"},
		Short:       "Precompile driver recipes with dkms for a kernel matrix into the module cache",
		Long: `Build compiles every RECIPE (a recipe file, or the name of a recipe in
--recipes) with the real dkms for each kernel of its matrix, or for the
--kernel releases given, and adds the modules the recipe keeps to the module
cache. A cell whose inputs (source, headers, compiler, ...) are already in the
cache is "cached" and not compiled. Missing kernels and driver packages are
downloaded into $KPRELOAD_CACHE (default ` + matrix.DefaultDownloadDir + `).

RECIPE:KVER asks for one cell: that recipe for that kernel only, whatever its
matrix and --kernel say; repeat it for more kernels. For example

  kpreload build testdriver nvidia-550-open:6.12.118+deb13-cloud-amd64

builds the test driver for its whole matrix and the open NVIDIA modules for
trixie's kernel. A kernel that is neither unpacked nor in the apt archive is
an error that lists the kernels there are.

Suites: a recipe's packages come from its suite: (default bookworm); other
suites (trixie, sid, ...) are read through kpreload's own apt configuration
under $KPRELOAD_CACHE/apt/<suite>, never installed, and a pinned version the
suite lacks is refused naming the versions it has. Kernels of another suite
than bookworm (6.12.118+deb13: trixie) are built in a build root of that
suite (mmdebstrap'd once under $KPRELOAD_CACHE/buildroot), with its compiler.

A recipe's patches: are applied to a copy of the DKMS source before dkms
runs; their digest is part of each cell's content key.

--fetch-only downloads and unpacks everything the matrix needs (kernels,
driver packages, patched sources, build roots) and computes each cell's key,
compiling nothing: cells the cache lacks are "fetched". Use it to warm a
machine's download cache before going offline or timing a build; with
--json each cell names its source_dir, kernel_dir and build_root.

A recipe's signing: section signs every kept module with the kernel's own
scripts/sign-file before it enters the cache; its supported-gpus: file is
stored with each set and carried into the boot index and the initramfs.

Remote cache: with --remote oci://HOST[:PORT]/REPO (any OCI registry: ECR,
GAR, GHCR, Harbor, a local registry; credentials from the Docker config and
its credential helpers, as docker login writes them; --plain-http only for a
registry without TLS), a cell the local cache lacks is pulled from the
registry when it holds the same key (state "pulled"; every blob verified),
cells built here and cached cells the registry lacks are pushed, and compile
failures are recorded there: a cell the registry records as failed with the
same key is not rebuilt (--retry-failed rebuilds it). --pull-only never
compiles. --report prints what the registry holds (every cell, which failed
and why) without building anything. --sign signs every cell pushed; with
--trust only cells signed by those keys are taken, and without it every cell
pulled is reported on stderr as unsigned (--json: "trust").

Shards: --shard I/N builds shard I (1..N) of the matrix; --shards N takes I
from $JOB_COMPLETION_INDEX (0-based), as a Kubernetes Indexed Job sets it.
The split is balanced by expected cost (an NVIDIA cell weighs as much as 100
test-driver cells) and is the same in every process given the same cells, so
N processes with the same arguments build the matrix once between them; run
them with --remote so every cell lands in one place.

Progress goes to stderr (on a terminal one status line: cells done of all, the
cell in progress, elapsed, an estimate of the time left; else plain lines), the
result table (or --json) to stdout. The exit
status is non-zero when any cell failed or a push failed. Ctrl-C stops the
builds and leaves the cache (and the registry) as it was.`,
		Example: `  kpreload build testdriver --kernel 6.1.0-56-cloud-amd64 --cache ./cache`,
		Args:    m.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := m.validate(); err != nil {
				return err
			}
			return m.run(cmd, args)
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *buildCommand) flags(cmd *cobra.Command) {
	opts, cf := &m.opts, &m.cf
	f := cmd.Flags()
	f.StringArrayVar(&opts.Kernels, "kernel", nil, "kernel release to build for, instead of the recipes' matrices (repeatable)")
	f.BoolVar(&m.asJSON, "json", false, "print the results as JSON")
	cf.Register(f, opts, "build", "directory of recipes for RECIPE names")
	f.BoolVar(&opts.PullOnly, "pull-only", false, "never compile: take cells from the local cache or the registry only")
	f.BoolVar(&opts.FetchOnly, "fetch-only", false, "download and prepare kernels, sources and build roots, compute keys, compile nothing (cells the cache lacks: \"fetched\")")
	f.BoolVar(&m.report, "report", false, "print the matrix state the registry holds (--remote), building nothing")
}

// args checks the arguments: recipes to build, or with --report
// recipes to narrow the registry's report to.
func (m *buildCommand) args(cmd *cobra.Command, args []string) error {
	if m.report {
		return nil
	}
	return mistakes.MinArgs(1)(cmd, args)
}

// validate checks the flags together.
func (m *buildCommand) validate() error {
	remote := m.cf.Remote.URL() != ""
	switch {
	case m.report && !remote:
		return fmt.Errorf("--report reads the registry: give --remote oci://HOST[:PORT]/REPO")
	case m.report:
		return nil
	case (m.opts.PullOnly || m.opts.RetryFailed) && !remote:
		return fmt.Errorf("--pull-only and --retry-failed need --remote")
	case m.opts.FetchOnly && (remote || m.opts.PullOnly):
		return fmt.Errorf("--fetch-only prepares this machine only: leave out --remote and --pull-only")
	}
	return m.cf.SetShard(&m.opts)
}

// run builds the cells of the recipes args name (RECIPE or RECIPE:KVER),
// or with --report prints what the registry holds.
func (m *buildCommand) run(cmd *cobra.Command, args []string) error {
	ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rm, err := m.cf.Remote.Open()
	if err != nil {
		return err
	}
	if m.report {
		return cells.PrintRemoteReport(ctx, cmd.OutOrStdout(), rm, args, m.asJSON)
	}
	opts := m.opts
	opts.Remote = rm
	if opts.Recipes, opts.RecipeKernels, err = loadBuildCells(args, m.cf.RecipesDir, opts.Kernels); err != nil {
		return err
	}
	p := cells.NewProgress(cmd.ErrOrStderr())
	opts.Progress = p.Event
	if opts.DownloadDir == "" {
		opts.DownloadDir = cmdenv.DownloadDir()
	}
	results, err := matrix.Run(ctx, opts)
	p.Stop()
	if results == nil {
		return err
	}
	printUnsigned(cmd.ErrOrStderr(), results, rm)
	out := cmd.OutOrStdout()
	if m.asJSON {
		if jerr := cmdout.PrintJSON(out, buildJSON(results)); jerr != nil {
			return jerr
		}
	} else {
		printBuildTable(out, results)
	}
	return err
}

// loadBuildCells loads the recipes and kernels args name (cells.LoadCells) and
// checks the kernel releases, of the arguments and of --kernel (kernels),
// as names.
func loadBuildCells(args []string, recipesDir string, kernels []string) ([]*recipe.Recipe, map[*recipe.Recipe][]string, error) {
	recipes, cellKernels, err := cells.LoadCells(args, recipesDir)
	if err != nil {
		return nil, nil, err
	}
	var kvers []string // flag or argument, kernel release
	for _, k := range kernels {
		kvers = append(kvers, "--kernel", k)
	}
	for _, r := range recipes {
		for _, k := range cellKernels[r] {
			kvers = append(kvers, r.Name+":KVER", k)
		}
	}
	if err := mistakes.CheckNames(kvers...); err != nil {
		return nil, nil, fmt.Errorf("build: %w", err)
	}
	return recipes, cellKernels, nil
}

// printUnsigned says on w, of every cell the build pulled from rm without
// a verified signature, that it did.
func printUnsigned(w io.Writer, results []matrix.Result, rm fmt.Stringer) {
	for _, r := range results {
		if note := cells.TrustNote(r.Trust, "an unchecked key"); note != "" && r.Remote == tiered.RemotePulled {
			fmt.Fprintf(w, "kpreload: build: %s for %s pulled from %s: %s\n", r.Recipe.Name, r.Kernel, rm, note)
		}
	}
}

// printBuildTable prints a kernel × recipe table of states, then the
// failures with their first error and log.
func printBuildTable(w io.Writer, results []matrix.Result) {
	tab := matrix.Table{Corner: "KERNEL"}
	// The driver version of each recipe: what a recipe that selects its
	// version by branch resolved to in this run.
	versions := matrix.TableNote{Name: "(version)", Values: map[string]string{}}
	counts := map[string]int{}
	for _, r := range results {
		s := r.State
		if r.Trust != "" && r.Trust != remote.TrustVerified {
			s += " (" + r.Trust + ")"
		}
		tab.Set(r.Kernel, r.Recipe.Name, s)
		if _, ok := versions.Values[r.Recipe.Name]; !ok {
			versions.Values[r.Recipe.Name] = r.Recipe.Driver.Version
		}
		counts[r.State]++
	}
	tab.Notes = []matrix.TableNote{versions}
	tab.Write(w)
	for _, r := range results {
		if r.State != matrix.StateFailed {
			continue
		}
		fmt.Fprintf(w, "\nFAILED %s for %s:\n  %s\n", r.Recipe.Name, r.Kernel, r.FirstError)
		if r.LogPath != "" {
			fmt.Fprintf(w, "  log: %s\n", r.LogPath)
		}
		if r.Remote == "known failure" {
			fmt.Fprintf(w, "  %v\n", r.Err)
		}
	}
	for _, r := range results {
		if r.PushErr != nil {
			fmt.Fprintf(w, "\nPUSH FAILED %s for %s:\n  %v\n", r.Recipe.Name, r.Kernel, r.PushErr)
		}
	}
	var parts []string
	for _, s := range []string{matrix.StateOK, matrix.StateCached, matrix.StatePulled, matrix.StateFetched, matrix.StateSkipped, matrix.StateFailed} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	fmt.Fprintf(w, "\n%d cells: %s\n", len(results), strings.Join(parts, ", "))
}

// buildResult is one cell in --json output.
type buildResult struct {
	Recipe     string            `json:"recipe"`
	Driver     string            `json:"driver"`
	Version    string            `json:"version"`
	Flavor     string            `json:"flavor"`
	Kernel     string            `json:"kernel"`
	State      string            `json:"state"`
	SetID      string            `json:"set_id,omitempty"`
	FirstError string            `json:"first_error,omitempty"`
	Error      string            `json:"error,omitempty"`
	Log        string            `json:"log,omitempty"`
	Seconds    float64           `json:"seconds"`
	Key        map[string]string `json:"key,omitempty"`
	Remote     string            `json:"remote,omitempty"`
	Trust      string            `json:"trust,omitempty"`
	PushError  string            `json:"push_error,omitempty"`
	SourceDir  string            `json:"source_dir,omitempty"`
	KernelDir  string            `json:"kernel_dir,omitempty"`
	BuildRoot  string            `json:"build_root,omitempty"`
}

func buildJSON(results []matrix.Result) []buildResult {
	out := make([]buildResult, 0, len(results))
	for _, r := range results {
		b := buildResult{
			Recipe:     r.Recipe.Name,
			Driver:     r.Recipe.Driver.Name,
			Version:    r.Recipe.Driver.Version,
			Flavor:     r.Recipe.Flavor,
			Kernel:     r.Kernel,
			State:      r.State,
			SetID:      r.SetID,
			FirstError: r.FirstError,
			Log:        r.LogPath,
			Seconds:    r.Duration.Seconds(),
			Key:        r.Key,
			SourceDir:  r.SourceDir,
			KernelDir:  r.KernelDir,
			BuildRoot:  r.BuildRoot,
		}
		if r.Err != nil {
			b.Error = r.Err.Error()
		}
		b.Remote, b.Trust = r.Remote, r.Trust
		if r.PushErr != nil {
			b.PushError = r.PushErr.Error()
		}
		out = append(out, b)
	}
	return out
}
