package cells

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/internal/layout"
)

// Flags are the flags build and follow share: the module cache, the
// builds at once, the recipes directory, the registry (with its signing and
// trust keys) and the shard of the matrix.
type Flags struct {
	// RecipesDir is --recipes ("" for its default: ResolveRecipesDir).
	RecipesDir string
	// Remote are the registry's flags.
	Remote RemoteFlags
	shard  string
	shards int
}

// Register adds the shared flags to f, writing the cache, jobs and
// retry-failed flags into opts; verb starts the shard flags' help ("build
// shard I of N") and recipesHelp is the --recipes help.
func (c *Flags) Register(f *pflag.FlagSet, opts *matrix.Options, verb, recipesHelp string) {
	f.StringVar(&opts.CacheDir, "cache", cmdenv.CacheDefaultDir(), "module cache directory")
	f.IntVar(&opts.Jobs, "jobs", 0, "cells to build at once (default: one per two CPUs)")
	f.StringVar(&c.RecipesDir, "recipes", "", recipesHelp+RecipesDefaultHelp)
	c.Remote.Register(f)
	f.BoolVar(&opts.RetryFailed, "retry-failed", false, "rebuild cells the registry records as failed with the same key")
	f.StringVar(&c.shard, "shard", "", verb+" shard I of N of the matrix (I/N, 1-based)")
	f.IntVar(&c.shards, "shards", 0, verb+" shard $JOB_COMPLETION_INDEX (0-based) of N (a Kubernetes Indexed Job)")
}

// RecipesDefaultHelp ends every --recipes help: where the default comes
// from (layout.RecipesDir decides it).
const RecipesDefaultHelp = " (default: ./recipes when it is a directory, else " + layout.Recipes + ")"

// ResolveRecipesDir is the --recipes value dir, or layout.RecipesDir's
// default when it was not given.
func ResolveRecipesDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	return layout.RecipesDir()
}

// SetShard sets opts.Shard from --shard I/N or from --shards N and
// $JOB_COMPLETION_INDEX; with neither it leaves opts.Shard as it is.
func (c *Flags) SetShard(opts *matrix.Options) error {
	var err error
	switch {
	case c.shard != "" && c.shards > 0:
		return fmt.Errorf("--shard and --shards: give one")
	case c.shard != "":
		opts.Shard, err = matrix.ParseShard(c.shard)
	case c.shards > 0:
		index, set := cmdenv.JobCompletionIndex()
		opts.Shard, err = matrix.ShardFromIndex(index, set, c.shards)
	}
	return err
}
