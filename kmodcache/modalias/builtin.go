package modalias

// BuiltinProvides reports whether code compiled into the kernel answers
// lookup (a module name or an alias, such as "crypto-crc32c"): a built-in
// module of that name, or a built-in module with an alias matching it. The
// kernel asks for a module (request_module) only for what it does not have,
// so a lookup a built-in provides never needs a loadable module, even where
// modules.alias names one too (crc32c_intel beside a built-in crc32c_generic).
func (t *Tree) BuiltinProvides(lookup string) bool {
	key, ok := normalizeAlias(lookup)
	if !ok || key == "" {
		return false
	}
	if t.builtin[key] {
		return true
	}
	return len(searchWild(t.builtinAliases, key)) > 0
}
