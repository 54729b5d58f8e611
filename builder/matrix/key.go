package matrix

import (
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

// KeySchema is the "schema" entry of every cache key Run writes; change it
// when the meaning of the key or of the build changes, so old sets stop matching.
// kpreload-build/2: dkms runs in its sandbox (fixed paths, no host
// configuration, dkms compresses nothing), so the same key gives the same
// bytes; how the cell then stores its modules is the key's
// module_compression (ModuleCompression), which needs no new schema.
const KeySchema = "kpreload-build/2"

// cellKey returns the cache key of one cell: every input that decides what
// the build produces, all known before building.
func cellKey(r *recipe.Recipe, src *source, k *kernel, x *extras) map[string]string {
	mods := make([]string, len(r.Modules))
	for i, m := range r.Modules {
		mods[i] = modname.Normalize(m)
	}
	slices.Sort(mods)
	key := map[string]string{
		"schema":                KeySchema,
		"driver":                r.Driver.Name,
		"version":               r.Driver.Version,
		"flavor":                r.Flavor,
		"modules":               strings.Join(mods, ","),
		"source_package":        r.Source.Package,
		"source_sha256":         src.digest,
		"dkms_conf_sha256":      src.confDigest,
		"kernel":                k.headers.Release,
		"headers_package":       k.headersPackage,
		"module_symvers_sha256": k.symvers,
		"kernel_config_sha256":  k.config,
		"kernel_cc":             k.headers.CCVersionText,
		"compiler":              k.compiler,
		"dkms":                  k.dkms,
		"module_compression":    k.compression,
		// The certificate's digest and the hash: unsigned builds, and builds
		// signed with another key, never match a signed set.
		"signing_key": x.signingKey(),
	}
	if src.patches != "" {
		// Only patched recipes have the entry (the patched tree's digest is
		// in source_sha256 too); the keys of the others stay what they were.
		key["patches_sha256"] = src.patches
	}
	if x.gpusDigest != "" {
		// Only recipes with a supported-GPU list have the entry, so the keys
		// of the others stay what they were.
		key["supported_gpus_sha256"] = x.gpusDigest
	}
	return key
}
