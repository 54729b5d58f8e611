package recipe

import "github.com/kpreload/kpreload/kmodcache/names"

// nameError says why v, a recipe's driver name or version, is not a name
// (kmodcache/names), without the field (the recipe's *Error names it); nil
// when it is one.
func nameError(v string) error { return names.Check("", v) }
