package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/kmodcache/modalias"
)

func init() { register(newMatchCmd) }

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

func newMatchCmd() *cobra.Command {
	var (
		modulesDir, kernel, root string
		aliases                  []string
		loadOrder, asJSON        bool
	)
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
			dir, err := matchModulesDir(modulesDir, kernel, root)
			if err != nil {
				return err
			}
			lookups := append(append([]string(nil), aliases...), args...)
			if len(lookups) == 0 {
				return errors.New("match: give at least one modalias (--modalias STRING or an argument)")
			}
			tree, err := modalias.LoadTree(dir)
			if err != nil {
				return fmt.Errorf("match: %w", err)
			}
			res := matchResult{ModulesDir: dir}
			seen := map[string]bool{}
			for _, a := range lookups {
				mods := tree.Resolve(a)
				res.Lookups = append(res.Lookups, matchLookup{Modalias: a, Modules: append([]string{}, mods...)})
				for _, m := range mods {
					if !seen[m] {
						seen[m] = true
						res.Modules = append(res.Modules, m)
					}
				}
			}
			if res.Modules == nil {
				res.Modules = []string{}
			}
			if loadOrder {
				res.LoadOrder = tree.LoadOrderFor(lookups...)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, res)
			}
			if len(res.Modules) == 0 {
				return fmt.Errorf("match: no module in %s matches %s", dir, strings.Join(lookups, ", "))
			}
			if loadOrder {
				for _, m := range res.LoadOrder {
					if m.Builtin {
						fmt.Fprintf(w, "builtin %s\n", m.Name)
					} else {
						fmt.Fprintf(w, "insmod %s\n", filepath.Join(dir, m.Path))
					}
				}
				return nil
			}
			for _, m := range res.Modules {
				fmt.Fprintln(w, m)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modulesDir, "modules-dir", "", "the kernel's modules directory (holding modules.dep)")
	f.StringVar(&kernel, "kernel", "", "kernel release; the tree is ROOT/lib/modules/KVER")
	f.StringVar(&root, "root", "/", "root directory holding lib/modules, with --kernel")
	f.StringArrayVar(&aliases, "modalias", nil, "a modalias to resolve (repeatable)")
	f.BoolVar(&loadOrder, "load-order", false, "print the insertion order (like modprobe --show-depends)")
	f.BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
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
