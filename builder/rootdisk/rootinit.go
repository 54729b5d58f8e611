package rootdisk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// ModulePath is the Go module path of kpreload, used to recognise its source tree.
const ModulePath = "github.com/kpreload/kpreload"

// RootInitPackage is the package path, relative to the module root, of the test /sbin/init.
const RootInitPackage = "./cmd/kpreload-rootinit"

// SourceEnv names the environment variable that points at kpreload's source tree when
// it cannot be found from the working directory.
const SourceEnv = "KPRELOAD_SRC"

// BuildRootInit compiles the test root filesystem's init (cmd/kpreload-rootinit) as a
// static linux/amd64 binary at outPath with the go tool, from the source tree
// ModuleRoot("") finds.
func BuildRootInit(ctx context.Context, outPath string) error {
	return BuildRootInitFrom(ctx, "", outPath)
}

// BuildRootInitFrom is BuildRootInit from the source tree src (commands pass
// $KPRELOAD_SRC; "" finds it as ModuleRoot does).
func BuildRootInitFrom(ctx context.Context, src, outPath string) error {
	return buildRootInit(ctx, runner.Default, src, outPath)
}

// buildRootInit is BuildRootInitFrom with the go tool run by r.
func buildRootInit(ctx context.Context, r runner.Runner, src, outPath string) error {
	root, err := ModuleRoot(src)
	if err != nil {
		return err
	}
	goBin, err := r.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, statErr := os.Stat(goBin); statErr != nil {
			return fmt.Errorf("rootdisk: the go tool is needed to build %s: %w", RootInitPackage, err)
		}
	}
	abs, err := filepath.Abs(outPath)
	if err != nil {
		return fmt.Errorf("rootdisk: output path: %w", err)
	}
	c := runner.Cmd{Name: goBin, Args: []string{"build", "-trimpath", "-ldflags=-s -w", "-o", abs, RootInitPackage},
		Dir: root, Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}, Combined: true}
	if _, err := r.Run(ctx, c); err != nil {
		return fmt.Errorf("rootdisk: build %s in %s: %w", RootInitPackage, root, err)
	}
	return nil
}

// ModuleRoot finds kpreload's source tree: src (a command's $KPRELOAD_SRC) when
// set, else the nearest directory at or above the working directory whose go.mod
// declares ModulePath, else the tree this package was compiled from.
func ModuleRoot(src string) (string, error) {
	var tried []string
	if dir := src; dir != "" {
		if isModuleRoot(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("rootdisk: $%s=%s has no go.mod for %s", SourceEnv, dir, ModulePath)
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if isModuleRoot(dir) {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
		tried = append(tried, wd+" and its parents")
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Dir(filepath.Dir(filepath.Dir(file))) // builder/rootdisk/rootinit.go
		if isModuleRoot(dir) {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	return "", errors.New("rootdisk: cannot find kpreload's source tree (tried " + strings.Join(tried, ", ") +
		"); run from inside it or set $" + SourceEnv)
}

// isModuleRoot reports whether dir/go.mod declares ModulePath.
func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(mod), `"`) == ModulePath
		}
	}
	return false
}
