// Package modorder is kpreload's one dependency order for kernel modules:
// each module after the modules it depends on. The boot index's sets take
// their load and unload orders from it, and the loader its plan.
package modorder

// Walk returns names and, depth first, everything they depend on, each module
// after its dependencies (a depth-first post-order), each once. deps gives a
// module's direct dependencies, visited in the order given; Walk calls it at
// most once per module, so it may do the work of resolving the module. An edge
// back to a module on the current path (a dependency cycle) is not followed:
// cycle, when not nil, is called with the module that has the edge, the
// module it points to, and the path that closes the cycle ("a", "b", "a").
func Walk(names []string, deps func(name string) []string, cycle func(from, to string, path []string)) []string {
	var order []string
	state := map[string]int{} // 1: on the current path, 2: done
	var stack []string
	var visit func(name string)
	visit = func(name string) {
		state[name] = 1
		stack = append(stack, name)
		for _, d := range deps(name) {
			switch state[d] {
			case 0:
				visit(d)
			case 1:
				if cycle != nil {
					i := len(stack) - 1
					for stack[i] != d {
						i--
					}
					cycle(name, d, append(append([]string(nil), stack[i:]...), d))
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = 2
		order = append(order, name)
	}
	for _, n := range names {
		if state[n] == 0 {
			visit(n)
		}
	}
	return order
}

// Reverse returns order from its end: an unload order (users before the
// modules they use) from a load order.
func Reverse(order []string) []string {
	out := make([]string, len(order))
	for i, n := range order {
		out[len(order)-1-i] = n
	}
	return out
}
