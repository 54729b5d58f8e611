// Package followcmd is kpreload follow: the archives followed, new cells built
// and pushed, and the freshness table (builder/follow).
package followcmd

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/follow"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
)

// ExitFollowNew is follow's default exit status when the cycle pushed new
// cells (--new-exit-code changes it).
const ExitFollowNew = 2

// followCommand is kpreload follow: its options, as the flags set them.
type followCommand struct {
	opts    matrix.Options
	cf      cells.Flags
	asJSON  bool
	newCode int
	wait    bool
}

// New builds kpreload follow.
func New() *cobra.Command { return (&followCommand{}).build() }

// build makes the command: its help and its flags.
func (m *followCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "follow [RECIPE...] --remote oci://HOST[:PORT]/REPO --sign KEY [--trust KEY...] [--shard I/N | --shards N] [--json] [--new-exit-code N]",
		Short: "One unattended cycle: build and push the cells a new kernel or driver upload needs, and print how fresh the registry is",
		Long: `Follow runs one cycle of following the archives. It first reaches the
--remote registry, within seconds and before anything is downloaded: the
repository is read and a blob upload opened and cancelled with the push
credentials; a registry that cannot be reached or refuses the credentials
stops the cycle with one line (exit 1). It then resolves every
selector of the recipes (kernels.select, and the driver branch of
source.select) against the apt archives as they are now: Debian's suites
and the extra archives a recipe's archives: or the recipes directory's
archives.yaml names. Every cycle rereads their package lists; apt checks
each Release file's signature and, for an extra archive, its Valid-Until,
and an archive that does not check stops the cycle before anything is
built. It compares the cells with the signed records of the --remote
registry, builds only the cells the registry lacks, signs them with --sign
and pushes them: what kpreload build --remote does, with the same recipe,
cache, registry and trust flags. With no RECIPE it follows every recipe in
--recipes; RECIPE:KVER follows one kernel of a recipe, as build takes it.
--shard I/N and --shards N split the cells by cost as build does.

Then it prints the freshness table: per kernel × recipe and driver version,
the cell's state (", new" when this cycle pushed it), PUBLISHED, when the
archive published the cell's packages, PUSHED, when the registry's record
of the cell was pushed, and LAG between the two. PUBLISHED is the later of
the kernel's and the driver's dates, each the Date of the Release file of
the suite that lists the package, from the first cycle on this machine that
saw that kernel and driver version (kept in
$KPRELOAD_CACHE/` + follow.SeenFile + `, follow-published-I-of-N.json for
shard I/N): apt's indexes carry no date per
package, so the archive published it at or before that time. --json
prints the table as JSON.

One cycle runs at a time per download cache ($KPRELOAD_CACHE/` + follow.LockFile + `,
a lock the kernel drops when its holder dies; each shard I/N has its own):
a second one says another cycle runs and builds nothing, or with --wait
waits for it. A cycle stopped mid-push (killed, a registry that fails)
leaves the built cells in the local cache; the next cycle pushes them.

Exit status: 0 nothing new, 2 new cells pushed (--new-exit-code N makes it
N: 0 for a Kubernetes Job that must succeed), 1 failures (a cell that did
not build in this cycle, a push that failed, an archive or registry that
did not check). A cell the registry records as failed with the same key is
not built again (--retry-failed does): it is listed as a known failure and
is no failure of the cycle.

Examples:
  kpreload follow testdriver:6.1.0-56-cloud-amd64 --remote oci://127.0.0.1:5055/team --plain-http --sign team.key --new-exit-code 0
  kpreload follow testdriver:6.1.0-56-cloud-amd64 --remote oci://127.0.0.1:5055/team --plain-http --sign team.key --trust team.pub --json

`,
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
func (m *followCommand) flags(cmd *cobra.Command) {
	opts, cf := &m.opts, &m.cf
	f := cmd.Flags()
	f.BoolVar(&m.asJSON, "json", false, "print the freshness table as JSON")
	cf.Register(f, opts, "follow", "directory of recipes: RECIPE names, and every recipe when none is named")
	f.IntVar(&m.newCode, "new-exit-code", ExitFollowNew, "exit status when the cycle pushed new cells")
	f.BoolVar(&m.wait, "wait", false, "when another cycle runs, wait for it instead of stopping")
}

// validate checks the flags: follow pushes signed cells.
func (m *followCommand) validate() error {
	if m.cf.Remote.URL() == "" || m.cf.Remote.SignKey() == "" {
		return fmt.Errorf("follow pushes signed cells: give --remote oci://HOST[:PORT]/REPO and --sign KEY")
	}
	if m.newCode < 0 || m.newCode > 125 {
		return fmt.Errorf("--new-exit-code %d: want 0..125", m.newCode)
	}
	return nil
}

// run follows the recipes args name (every recipe when none) for one
// cycle and prints the freshness table.
func (m *followCommand) run(cmd *cobra.Command, args []string) error {
	ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := m.opts
	rm, err := m.cf.Remote.Open()
	if err != nil {
		return err
	}
	opts.Remote = rm
	if err := m.cf.SetShard(&opts); err != nil {
		return err
	}
	if opts.Recipes, opts.RecipeKernels, err = followCells(args, m.cf.RecipesDir); err != nil {
		return err
	}
	if opts.DownloadDir == "" {
		opts.DownloadDir = cmdenv.DownloadDir()
	}
	p := cells.NewProgress(cmd.ErrOrStderr())
	opts.Progress = p.Event
	rep, err := follow.Cycle(ctx, follow.Options{Build: opts, StateDir: cmdenv.DownloadDefaultDir(), Wait: m.wait})
	p.Stop()
	if rep != nil {
		out := cmd.OutOrStdout()
		if m.asJSON {
			if jerr := cmdout.PrintJSON(out, rep); jerr != nil {
				return jerr
			}
		} else if terr := rep.WriteTable(out); terr != nil {
			return terr
		}
	}
	switch {
	case err != nil:
		return clirun.Exit(1, err)
	case rep.New > 0 && m.newCode != 0:
		return clirun.Exit(m.newCode, nil)
	}
	return nil
}

// followCells are the recipes (and kernels of RECIPE:KVER) args name, or
// every recipe in recipesDir when args name none.
func followCells(args []string, recipesDir string) ([]*recipe.Recipe, map[*recipe.Recipe][]string, error) {
	if len(args) > 0 {
		return cells.LoadCells(args, recipesDir)
	}
	dir, err := cells.ResolveRecipesDir(recipesDir)
	if err != nil {
		return nil, nil, err
	}
	recipes, err := recipe.LoadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	return recipes, map[*recipe.Recipe][]string{}, nil
}
