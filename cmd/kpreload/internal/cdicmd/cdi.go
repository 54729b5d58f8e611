// Package cdicmd is kpreload cdi: the CDI spec of the active driver
// (gpu/cdispec) generated, refreshed after a switch or reboot, recorded in the
// boot report, and the hook a container runtime calls.
package cdicmd

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot"
)

// New builds kpreload cdi and its subcommands.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cdi",
		Short: "Container Device Interface spec for the active NVIDIA driver",
		Long: `cdi describes the loaded NVIDIA driver to container runtimes (docker, podman,
containerd, CRI-O) as a CDI spec of kind nvidia.com/gpu, and provides the
createContainer hook that spec names.`,
		Example: `  kpreload cdi refresh --json`,
		Args:    mistakes.NoArgs,
	}
	cmd.AddCommand(newCDIGenerateCmd(), newCDIRefreshCmd(), newCDIHookCmd())
	return cmd
}

// cdiGenerateCommand is kpreload cdi generate: its options, as the flags
// set them.
type cdiGenerateCommand struct {
	root, out, hookPath string
	asJSON              bool
}

func newCDIGenerateCmd() *cobra.Command { return (&cdiGenerateCommand{}).build() }

// build makes the command: its help and its flags.
func (m *cdiGenerateCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "generate [--root DIR] [--json] [-o FILE]",
		Short: "Write the CDI spec (nvidia.com/gpu) of the loaded NVIDIA driver",
		Long: `generate writes a CDI spec of kind nvidia.com/gpu with one device per GPU,
named by index (nvidia.com/gpu=0) and by UUID (nvidia.com/gpu=GPU-...), and
nvidia.com/gpu=all. Every device brings its /dev/nvidia<minor>; the spec-wide
edits bring /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, the driver
version's libraries (*.so.<version>) and
binaries (nvidia-smi, nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-*)
mounted read-only, the GSP firmware directory /lib/firmware/nvidia/<version>, the
nvidia-persistenced socket when it exists, and a createContainer hook
("kpreload cdi hook update-ldcache") that rebuilds the container's linker cache
so libcuda.so.1 resolves. The MIG capabilities are not shared: their
/dev/nvidia-caps nodes come only with the devices nvidia.com/gpu=` + cdispec.DeviceMIGConfig + `
(configure MIG: a root process holding it can change the host's MIG layout)
and nvidia.com/gpu=` + cdispec.DeviceMIGMonitor + `, requested beside a GPU.

On a kpreload image the driver is the activation record /run/kpreload/ready and
the userspace behind /run/kpreload/driver; libraries are mounted under
/usr/lib/x86_64-linux-gnu and binaries under /usr/bin in the container. On any
other host (no /run/kpreload/ready) the version comes from
/proc/driver/nvidia/version and the libraries are the *.so.<version> files in the
directories of the linker cache (/etc/ld.so.cache) and the usual library
directories (/usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/local/nvidia/lib64, ...),
mounted at their own paths, as nvidia-ctk does. What was found goes to stderr.

DIR is "/" or a tree holding proc, sys, dev, run, etc (e.g. a fixture); nothing
is changed there. Every path is resolved inside DIR (no link or ".." leads out
of it), only regular files are read and each read is bounded (1 MiB for
/proc files, 64 KiB for sysfs attributes, 16 MiB for /etc/ld.so.cache); an
input that breaks these rules is an error naming the file. The spec is validated with the CDI library before it is
written; with -o it replaces FILE atomically (runtimes read /etc/cdi and
/var/run/cdi), marked as kpreload's by its first line, and only when FILE is
missing or a spec kpreload wrote: a spec another tool wrote (NVIDIA's toolkit
keeps /var/run/cdi/nvidia.yaml and /etc/cdi/nvidia.yaml) is refused, never
replaced. A JSON FILE (--json) carries no marker, so it is only created.

On the GPU host itself: kpreload cdi generate -o /var/run/cdi/kpreload-nvidia.yaml
(or --json | jq '.devices[].name' to list the device names). The examples read
./h200-root, a tree holding an H200 machine's proc/driver/nvidia, proc/devices
and a driver library; then containers ask for the devices by name.`,
		Example: `  kpreload cdi generate --root ./h200-root
  kpreload cdi generate --root ./h200-root --json -o h200-spec.json
  docker run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi
  podman run --rm --device nvidia.com/gpu=0 ubuntu nvidia-smi -L`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m.complete()
			return m.run(cmd)
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *cdiGenerateCommand) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.root, "root", "/", "root of the system to describe (reads DIR/proc, DIR/sys, DIR/dev, DIR/run, DIR/etc)")
	f.StringVarP(&m.out, "output", "o", "", "file to write atomically (default: stdout)")
	f.BoolVar(&m.asJSON, "json", false, "write JSON instead of YAML")
	f.StringVar(&m.hookPath, "hook-path", "", "host path of the kpreload binary the hook runs (default: "+cdispec.DefaultHookPath+" on kpreload images, this binary elsewhere)")
}

// complete completes the options: the hook runs this binary when
// --hook-path names none and the root is not a kpreload image.
func (m *cdiGenerateCommand) complete() {
	if m.hookPath != "" {
		return
	}
	if _, err := inroot.Stat(m.root, activate.ReadyPath(activate.RunDir)); err != nil {
		if exe, err := os.Executable(); err == nil {
			m.hookPath = exe
		}
	}
}

// run makes the spec, validates it and writes it to -o or stdout.
func (m *cdiGenerateCommand) run(cmd *cobra.Command) error {
	spec, found, err := cdispec.Generate(m.root, cdispec.Options{HookPath: m.hookPath})
	if err != nil {
		return err
	}
	cdiReport(cmd, found)
	data, err := cdispec.Marshal(spec, m.asJSON)
	if err != nil {
		return err
	}
	if m.out == "" {
		if _, err := cdispec.Validate(data, m.asJSON); err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	if m.asJSON {
		err = cdispec.WriteNew(m.out, data, true)
	} else {
		err = writeOwnSpec(m.out, data)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "cdi: wrote %s (%d devices, valid CDI %s)\n", m.out, len(spec.Devices), spec.Version)
	return nil
}

func newCDIRefreshCmd() *cobra.Command {
	var root, file, hookPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "refresh [--root DIR] [-o FILE] [--json]",
		Short: "Write or remove kpreload's CDI specs to match the active driver",
		Long: `refresh is for kpreload images (after activation at boot, after kpreload
switch). Without -o it keeps every spec kpreload writes in line with the driver
/run/kpreload/ready names: an active NVIDIA driver gets ` + cdispec.DefaultSpecFile + `
(kind ` + cdispec.Kind + `, as "generate" makes it), kpreload's test driver gets
` + cdispec.EduSpecFile + ` (kind ` + cdispec.EduKind + `), each validated and written
atomically, and the other file is removed; with no active driver both are
removed, so containers never get another driver's or version's files. With -o
FILE (a .yaml path of the system under DIR) only NVIDIA's spec is written there
(or FILE removed).

kpreload writes over or removes only the specs it wrote: each starts with the
line "` + cdispec.Marker + `".
Any other file is left as it is and named ("left /var/run/cdi/nvidia.yaml (not
written by kpreload)": NVIDIA Container Toolkit's nvidia-cdi-refresh keeps that
one); a file kpreload did not write at kpreload's own name is an error naming it.
A spec an older kpreload wrote at /var/run/cdi/nvidia.yaml goes only while it is
byte for byte the one the boot report records. Two specs in one directory that
define the same device names (both nvidia.com/gpu=all) make runtimes refuse
those names: refresh warns, and "nvidia: false" in ` + cdispec.ConfigFile + ` turns
kpreload's NVIDIA spec off. The boot report's "cdi" section records the spec
written. --json prints what was done as JSON.`,
		Example: `  kpreload cdi refresh
  kpreload cdi refresh --json
  kpreload cdi refresh --root /mnt -o /run/cdi/kpreload-nvidia.yaml`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			target := file
			if !cmd.Flags().Changed("output") {
				target = ""
			}
			res, err := Refresh(root, target, cdispec.Options{HookPath: hookPath})
			if res == nil {
				res = &cdispec.Result{}
			}
			if asJSON {
				out := struct {
					*cdispec.Result
					Summary string `json:"summary"`
					Error   string `json:"error,omitempty"`
				}{Result: res, Summary: cdiSummary(res)}
				if err != nil {
					out.Error = err.Error()
				}
				if jerr := cmdout.PrintJSON(cmd.OutOrStdout(), out); jerr != nil {
					return errors.Join(err, jerr)
				}
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "cdi: "+cdiSummary(res))
			for _, w := range res.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "cdi: warning: "+w)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "/", "root of the system")
	f.StringVarP(&file, "output", "o", cdispec.DefaultSpecFile, "spec file (a .yaml path of the system under --root)")
	f.StringVar(&hookPath, "hook-path", "", "host path of the kpreload binary the hook runs (default "+cdispec.DefaultHookPath+")")
	f.BoolVar(&asJSON, "json", false, "print what was done as JSON")
	return cmd
}

// cdiReport prints what generate found to stderr.
func cdiReport(cmd *cobra.Command, f *cdispec.Found) {
	w := cmd.ErrOrStderr()
	fmt.Fprintf(w, "cdi: NVIDIA %s (%s", f.Version, f.Source)
	if f.DriverDir != "" {
		fmt.Fprintf(w, ", userspace %s", f.DriverDir)
	}
	fmt.Fprintln(w, ")")
	for i, g := range f.GPUs {
		fmt.Fprintf(w, "cdi: gpu %d: %s /dev/nvidia%d %s\n", i, g.Bus, g.Minor, g.UUID)
	}
	for _, n := range f.Nodes {
		switch n.Path {
		case f.MIGConfig:
			fmt.Fprintf(w, "cdi: node %s (only with %s=%s)\n", n, cdispec.Kind, cdispec.DeviceMIGConfig)
		case f.MIGMonitor:
			fmt.Fprintf(w, "cdi: node %s (only with %s=%s)\n", n, cdispec.Kind, cdispec.DeviceMIGMonitor)
		default:
			fmt.Fprintf(w, "cdi: node %s\n", n)
		}
	}
	fmt.Fprintf(w, "cdi: %d libraries, binaries %v\n", len(f.Libraries), f.Binaries)
	fmt.Fprintf(w, "cdi: firmware %q, persistenced socket %q, ld cache folders %v\n", f.Firmware, f.Socket, f.LdcacheFolders)
}

func newCDIHookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "hook",
		Short:   "OCI hooks named by kpreload's CDI spec (run by container runtimes)",
		Example: `  kpreload cdi hook update-ldcache --container-root ./rootfs --folder /usr/local/nvidia/lib64`,
		Args:    mistakes.NoArgs,
	}
	var (
		folders                 []string
		ldconfig, containerRoot string
	)
	ld := &cobra.Command{
		Use:   "update-ldcache --folder DIR... [--ldconfig-path PATH] [--container-root DIR]",
		Short: "Add folders to a container's linker configuration and run ldconfig in it",
		Long: `update-ldcache is a createContainer hook: the runtime passes the container
state (OCI JSON: id, bundle, ...) on stdin; the hook finds the container's root
from <bundle>/config.json, writes the folders that are not configured yet to
<root>/etc/ld.so.conf.d/00-kpreload-cdi.conf (and an /etc/ld.so.conf including
ld.so.conf.d/*.conf when the image has none), then runs the host's
"ldconfig -r <root>", so libcuda.so.1 and the other mounted driver libraries
resolve in the container. Folders are container paths; missing ones are skipped.`,
		Example: `  # in a CDI spec:
  #   hooks:
  #   - hookName: createContainer
  #     path: /usr/bin/kpreload
  #     args: [kpreload, cdi, hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  kpreload cdi hook update-ldcache --container-root ./rootfs --folder /usr/local/nvidia/lib64`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := containerRoot
			if root == "" {
				var err error
				if root, err = cdispec.ContainerRoot(cmd.InOrStdin()); err != nil {
					return fmt.Errorf("update-ldcache: %w", err)
				}
			}
			return cdispec.UpdateLdcache(root, ldconfig, folders)
		},
	}
	f := ld.Flags()
	f.StringArrayVar(&folders, "folder", nil, "container directory to add to the linker configuration (repeatable)")
	f.StringVar(&ldconfig, "ldconfig-path", cdispec.DefaultLdconfig, "the host's ldconfig")
	f.StringVar(&containerRoot, "container-root", "", "container root (default: from the OCI state on stdin)")
	cmd.AddCommand(ld)
	return cmd
}
