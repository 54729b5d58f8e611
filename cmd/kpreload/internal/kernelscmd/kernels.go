// Package kernelscmd is kpreload kernels: Debian kernel packages fetched and
// unpacked into the download cache (builder/archive).
package kernelscmd

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
)

// New builds kpreload kernels and kernels fetch.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "kernels",
		Short:   "Fetch and unpack Debian kernels to build for and boot, never installing them",
		Example: `  kpreload kernels fetch 6.1.0-56-cloud-amd64`,
	}
	cmd.AddCommand(newKernelsFetchCmd())
	return cmd
}

// kernelJSON is one kernel of kernels fetch --json.
type kernelJSON struct {
	Kernel  string  `json:"kernel"`
	Suite   string  `json:"suite"`
	Dir     string  `json:"dir"`
	Fetched bool    `json:"fetched"`
	Seconds float64 `json:"seconds"`
}

// kernelsFetchCommand is kpreload kernels fetch: its options, as the
// flags set them.
type kernelsFetchCommand struct {
	suite, cache string
	asJSON       bool
}

func newKernelsFetchCmd() *cobra.Command { return (&kernelsFetchCommand{}).build() }

// build makes the command: its help and its flags.
func (m *kernelsFetchCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fetch [--suite S] [--cache DIR] [--json] KVER...",
		Short: "Download and unpack Debian kernels (image, headers, kbuild) under $KPRELOAD_CACHE/kernels",
		Long: `Fetch makes sure each kernel release KVER (uname -r, such as
6.1.0-56-cloud-amd64) is unpacked under DIR/kernels/KVER, where kpreload build,
kpreload image build, the tests and the benchmarks find it. It downloads, with
apt-get download into DIR/debs, the kernel's image package (the -unsigned one
when the suite has it), linux-headers-KVER and the headers' linux-headers-* and
linux-kbuild-* dependencies (sign-file lives in linux-kbuild), and unpacks them
with dpkg -x: nothing is installed and the host's dpkg database is not touched.
Modules a merged-/usr package ships under usr/lib/modules are moved to
lib/modules, and depmod -b makes the module indexes.

Each kernel is unpacked into a temporary directory and renamed into place with
a .complete marker: an interrupted fetch leaves nothing half-made, and a kernel
already there is kept and not fetched again.

The suite is --suite, else the one the release names (+deb13: trixie, +deb14:
forky, anything else bookworm). Every suite, bookworm included, is read
through kpreload's own apt configuration under DIR/apt/SUITE. A kernel the suite lacks is an error that lists its cloud
kernels. DIR is --cache, else $KPRELOAD_CACHE, else /var/cache/kpreload.

Progress goes to stderr; --json prints one object per kernel (kernel, suite,
dir, fetched, seconds) to stdout. scripts/kernels.sh runs this command.`,
		Example: `  kpreload kernels fetch 6.1.0-56-cloud-amd64`,
		Args:    kernelsFetchArgs,
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
func (m *kernelsFetchCommand) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.suite, "suite", "", "Debian suite to fetch from (default: the one each release names)")
	f.StringVar(&m.cache, "cache", cmdenv.DownloadDefaultDir(), "download cache: debs/, kernels/, apt/ ($KPRELOAD_CACHE)")
	f.BoolVar(&m.asJSON, "json", false, "print the kernels as JSON")
}

// kernelsFetchArgs checks that the arguments name a kernel release.
func kernelsFetchArgs(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("kernels fetch: name at least one kernel release (KVER), such as 6.1.0-56-cloud-amd64")
	}
	return nil
}

// validate checks the flags.
func (m *kernelsFetchCommand) validate() error {
	if m.suite != "" {
		return archive.CheckSuite(m.suite)
	}
	return nil
}

// run fetches and unpacks the kernels kvers, each from its suite.
func (m *kernelsFetchCommand) run(cmd *cobra.Command, kvers []string) error {
	ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stderr := cmd.ErrOrStderr()
	progress := func(line string) { fmt.Fprintln(stderr, line) }
	archives := map[string]*archive.Archive{}
	var out []kernelJSON
	for _, kver := range kvers {
		s := m.suite
		if s == "" {
			s = archive.KernelSuite(kver)
		}
		a, ok := archives[s]
		if !ok {
			var err error
			if a, err = archive.New(s, m.cache); err != nil {
				return err
			}
			archives[s] = a
		}
		fetched := !archive.KernelUnpacked(m.cache, kver)
		start := time.Now()
		dir, err := a.FetchKernel(ctx, kver, m.cache, progress)
		if err != nil {
			return err
		}
		if !fetched {
			progress(fmt.Sprintf("kernel %s already unpacked in %s", kver, dir))
		}
		out = append(out, kernelJSON{Kernel: kver, Suite: s, Dir: dir, Fetched: fetched, Seconds: time.Since(start).Seconds()})
	}
	if m.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), out)
	}
	return nil
}
