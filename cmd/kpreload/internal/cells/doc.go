// Package cells holds what kpreload's commands over cells share (build,
// follow, cache push and pull, image build, install --stage, recipe): the
// module cache, recipes, registry and shard flags and their checks, the
// loading of the recipes and cells the arguments name, the progress of a
// matrix build, and the registry's report.
package cells
