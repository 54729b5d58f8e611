// Command dkmsbuild builds one DKMS package source for one kernel with the
// real dkms, in an isolated tree (package dkms), and copies the built
// modules into an output directory. scripts/build-testdriver.sh uses it
// until the build pipeline exists.
//
//	dkmsbuild -src DIR -kernel KVER -out OUTDIR [-headers DIR] [-jobs N] [-keep-work] [-json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kpreload/kpreload/builder/dkms"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "dkmsbuild: %v\n", err)
		os.Exit(1)
	}
}

// summary is what -json prints.
type summary struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Kernel   string   `json:"kernel"`
	Modules  []string `json:"modules"`
	Seconds  float64  `json:"seconds"`
	CC       string   `json:"cc"`
	Compiler string   `json:"compiler"`
	Warnings []string `json:"warnings,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dkmsbuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	src := fs.String("src", "", "package source directory (holds dkms.conf)")
	kernel := fs.String("kernel", "", "kernel release to build for")
	headers := fs.String("headers", "", "kernel headers directory (default $KPRELOAD_CACHE/kernels/<kernel>/usr/src/linux-headers-<kernel>)")
	out := fs.String("out", "", "directory to copy the built modules into")
	jobs := fs.Int("jobs", 0, "parallel make jobs (0: one per CPU)")
	keep := fs.Bool("keep-work", false, "keep the dkms work directory (it is always kept when the build fails)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("v", false, "show dkms's output while it runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *src == "" || *kernel == "" || *out == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("need -src, -kernel and -out")
	}
	if *headers == "" {
		cache := os.Getenv("KPRELOAD_CACHE")
		if cache == "" {
			cache = "/var/cache/kpreload"
		}
		*headers = filepath.Join(cache, "kernels", *kernel, "usr", "src", "linux-headers-"+*kernel)
	}

	parent, err := os.MkdirTemp("", "kpreload-dkms-")
	if err != nil {
		return fmt.Errorf("make work dir: %w", err)
	}
	req := dkms.BuildRequest{
		SourceDir:       *src,
		Kernel:          *kernel,
		KernelSourceDir: *headers,
		WorkDir:         filepath.Join(parent, "work"),
		Jobs:            *jobs,
	}
	if *verbose {
		req.Output = stderr
	}
	res, err := dkms.New().Build(ctx, req)
	if err != nil {
		var be *dkms.BuildError
		if errors.As(err, &be) {
			return fmt.Errorf("%w\nwork directory kept: %s", err, parent)
		}
		os.RemoveAll(parent)
		return err
	}
	copied, err := dkms.CopyModules(res, *out)
	if err != nil {
		return fmt.Errorf("%w (work directory kept: %s)", err, parent)
	}
	if *keep {
		fmt.Fprintf(stderr, "work directory kept: %s\n", parent)
	} else if err := os.RemoveAll(parent); err != nil {
		return fmt.Errorf("remove work dir: %w", err)
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(summary{
			Name: res.Name, Version: res.Version, Kernel: res.Kernel, Modules: copied,
			Seconds: res.Duration.Seconds(), CC: res.CC, Compiler: res.CompilerVersion, Warnings: res.Warnings,
		})
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, m := range copied {
		fmt.Fprintf(stdout, "%s %s for %s (CC=%s) in %v: %s\n", res.Name, res.Version, res.Kernel, res.CC, res.Duration.Round(time.Millisecond), m)
	}
	return nil
}
