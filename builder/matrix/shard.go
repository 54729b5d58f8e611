package matrix

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Expected relative costs of a cell, for sharding: a packaged DKMS source
// (an NVIDIA driver: 3 to 18 minutes a cell on 2 cores) against a recipe's
// own small source directory (the test driver: seconds).
const (
	costPackaged = 100
	costLocal    = 1
)

// CellCost is a cell's expected build cost, in the units Shard balances.
func CellCost(c Cell) int {
	if c.Recipe.Source.Package != "" {
		return costPackaged
	}
	return costLocal
}

// Shard says which part of a matrix one process builds: shard Index (1..Count) of Count.
type Shard struct {
	Index, Count int
}

// String returns "I/N".
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// ParseShard reads "I/N" (1 <= I <= N).
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want I/N, such as 1/4", s)
	}
	sh := Shard{}
	var err1, err2 error
	sh.Index, err1 = strconv.Atoi(strings.TrimSpace(i))
	sh.Count, err2 = strconv.Atoi(strings.TrimSpace(n))
	if err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("shard %q: want I/N with whole numbers, such as 1/4", s)
	}
	return sh, sh.check()
}

// ShardFromIndex is the shard of a Kubernetes Indexed Job's pod: v is its
// $JOB_COMPLETION_INDEX (0-based, as Kubernetes sets it; ok false when unset,
// as os.LookupEnv in cmd/ returns it) of count shards.
func ShardFromIndex(v string, ok bool, count int) (Shard, error) {
	if !ok {
		return Shard{}, fmt.Errorf("--shards %d: JOB_COMPLETION_INDEX is not set (a Kubernetes Indexed Job sets it; else use --shard I/N)", count)
	}
	i, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return Shard{}, fmt.Errorf("JOB_COMPLETION_INDEX=%q: not a number", v)
	}
	sh := Shard{Index: i + 1, Count: count}
	if err := sh.check(); err != nil {
		return Shard{}, fmt.Errorf("JOB_COMPLETION_INDEX=%d with --shards %d: %w", i, count, err)
	}
	return sh, nil
}

func (s Shard) check() error {
	if s.Count < 1 || s.Index < 1 || s.Index > s.Count {
		return fmt.Errorf("shard %d/%d: want 1 <= I <= N", s.Index, s.Count)
	}
	return nil
}

// Assign splits cells into count shards balanced by CellCost: longest cells
// first, each to the shard with the least cost so far (ties to the lowest
// shard), cells of equal cost in recipe-name and kernel order. It depends
// only on the cells, so every process of a sharded build computes the same
// split. Each shard keeps the cells' original order.
func Assign(cells []Cell, count int) [][]Cell {
	order := make([]int, len(cells))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ca, cb := cells[a], cells[b]
		return cmp.Or(
			cmp.Compare(CellCost(cb), CellCost(ca)),
			cmp.Compare(ca.Recipe.Name, cb.Recipe.Name),
			cmp.Compare(ca.Kernel, cb.Kernel),
		)
	})
	load := make([]int, count)
	owner := make([]int, len(cells))
	for _, i := range order {
		best := 0
		for s := 1; s < count; s++ {
			if load[s] < load[best] {
				best = s
			}
		}
		owner[i] = best
		load[best] += CellCost(cells[i])
	}
	out := make([][]Cell, count)
	for i, c := range cells {
		out[owner[i]] = append(out[owner[i]], c)
	}
	return out
}
