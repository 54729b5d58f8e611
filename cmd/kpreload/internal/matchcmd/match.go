// Package matchcmd is kpreload match: the modules of a tree that the machine's
// devices match (kmodcache/modalias), in modprobe's order.
package matchcmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/kmodcache/modalias"
)

// matchLookup is one modalias and the modules it resolves to, for --json.
type matchLookup struct {
	Modalias string   `json:"modalias"`
	Modules  []string `json:"modules"`
}

// matchResult is the --json output of kpreload match.
type matchResult struct {
	ModulesDir string            `json:"modules_dir"`
	Lookups    []matchLookup     `json:"lookups"`
	Modules    []string          `json:"modules"`
	LoadOrder  []modalias.Module `json:"load_order,omitempty"`
}

// matchCommand is kpreload match: its options, as the flags set them.
type matchCommand struct {
	modulesDir, kernel, root string
	aliases                  []string
	loadOrder, asJSON        bool
}

// New builds kpreload match.
func New() *cobra.Command { return (&matchCommand{}).build() }

// build makes the command: its help and its flags.
func (m *matchCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "match (--modules-dir DIR | --kernel KVER [--root DIR]) [--modalias STRING]... [MODALIAS]...",
		Short: "Resolve modaliases to kernel modules the way modprobe does",
		Long: `match resolves each modalias (or module name, or alias such as fs-ext4) against
one kernel's module tree exactly as "modprobe -R" does: modules.dep names,
modules.alias patterns (glibc fnmatch), built-in modules and their aliases, in
kmod's order. It prints the modules found, one per line, each once.

With --load-order it prints instead what "modprobe --show-depends" would do for
all of them: "insmod PATH" for each module to insert, dependencies and softdep
modules first, and "builtin NAME" for modules compiled into the kernel.

The tree is --modules-dir, or ROOT/lib/modules/KVER with --kernel (and --root,
default /). The host's modprobe.d configuration is not consulted. Exits with an
error when nothing matches (unless --json).

On the running host: kpreload match --kernel "$(uname -r)" --modalias "$(cat
/sys/bus/pci/devices/0000:00:01.0/modalias)". The examples read a kernel that
kpreload kernels fetch 6.1.0-56-cloud-amd64 unpacked, linked here as
./6.1.0-56-cloud-amd64 (ln -s "$KPRELOAD_CACHE/kernels/6.1.0-56-cloud-amd64" .;
$KPRELOAD_CACHE defaults to /var/cache/kpreload): a virtio network device's
modalias, and the virtio block device's load order.`,
		Example: `  kpreload match --root ./6.1.0-56-cloud-amd64 --kernel 6.1.0-56-cloud-amd64 --modalias pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00
  kpreload match --modules-dir ./6.1.0-56-cloud-amd64/lib/modules/6.1.0-56-cloud-amd64 --load-order virtio:d00000002v00001AF4`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, lookups, err := m.validate(args)
			if err != nil {
				return err
			}
			return m.run(cmd.OutOrStdout(), dir, lookups)
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *matchCommand) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.modulesDir, "modules-dir", "", "the kernel's modules directory (holding modules.dep)")
	f.StringVar(&m.kernel, "kernel", "", "kernel release; the tree is ROOT/lib/modules/KVER")
	f.StringVar(&m.root, "root", "/", "root directory holding lib/modules, with --kernel")
	f.StringArrayVar(&m.aliases, "modalias", nil, "a modalias to resolve (repeatable)")
	f.BoolVar(&m.loadOrder, "load-order", false, "print the insertion order (like modprobe --show-depends)")
	f.BoolVar(&m.asJSON, "json", false, "print a JSON object")
}

// validate checks the flags and the arguments: it returns the modules
// directory and the modaliases to resolve, of --modalias and the
// arguments.
func (m *matchCommand) validate(args []string) (dir string, lookups []string, err error) {
	if dir, err = matchModulesDir(m.modulesDir, m.kernel, m.root); err != nil {
		return "", nil, err
	}
	lookups = append(append([]string(nil), m.aliases...), args...)
	if len(lookups) == 0 {
		return "", nil, errors.New("match: give at least one modalias (--modalias STRING or an argument)")
	}
	return dir, lookups, nil
}

// run resolves lookups in the module tree dir and prints the modules, or
// their load order, on w.
func (m *matchCommand) run(w io.Writer, dir string, lookups []string) error {
	tree, err := modalias.LoadTree(dir)
	if err != nil {
		return fmt.Errorf("match: %w", err)
	}
	res := resolveAll(tree, dir, lookups, m.loadOrder)
	if m.asJSON {
		return cmdout.PrintJSON(w, res)
	}
	if len(res.Modules) == 0 {
		return fmt.Errorf("match: no module in %s matches %s", dir, strings.Join(lookups, ", "))
	}
	if m.loadOrder {
		for _, mod := range res.LoadOrder {
			if mod.Builtin {
				fmt.Fprintf(w, "builtin %s\n", mod.Name)
			} else {
				fmt.Fprintf(w, "insmod %s\n", filepath.Join(dir, mod.Path))
			}
		}
		return nil
	}
	for _, mod := range res.Modules {
		fmt.Fprintln(w, mod)
	}
	return nil
}

// resolveAll resolves each of lookups in tree (the module tree dir): the
// modules of each, every module once, and with loadOrder the order
// modprobe would insert them in.
func resolveAll(tree *modalias.Tree, dir string, lookups []string, loadOrder bool) matchResult {
	res := matchResult{ModulesDir: dir, Modules: []string{}}
	seen := map[string]bool{}
	for _, a := range lookups {
		mods := tree.Resolve(a)
		res.Lookups = append(res.Lookups, matchLookup{Modalias: a, Modules: append([]string{}, mods...)})
		for _, mod := range mods {
			if !seen[mod] {
				seen[mod] = true
				res.Modules = append(res.Modules, mod)
			}
		}
	}
	if loadOrder {
		res.LoadOrder = tree.LoadOrderFor(lookups...)
	}
	return res
}

// matchModulesDir picks the modules directory from --modules-dir or --kernel/--root.
func matchModulesDir(modulesDir, kernel, root string) (string, error) {
	switch {
	case modulesDir != "" && kernel != "":
		return "", errors.New("match: give --modules-dir or --kernel, not both")
	case modulesDir != "":
		return modulesDir, nil
	case kernel != "":
		if strings.ContainsRune(kernel, '/') {
			return "", fmt.Errorf("match: --kernel %q: want a kernel release such as 6.1.0-56-cloud-amd64", kernel)
		}
		return filepath.Join(root, "lib/modules", kernel), nil
	}
	return "", errors.New("match: give the module tree with --modules-dir DIR or --kernel KVER [--root DIR]")
}
