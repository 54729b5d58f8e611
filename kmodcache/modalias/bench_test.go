package modalias

import "testing"

// BenchmarkResolve measures what /init does at boot: load a kernel's module tree,
// then resolve every PCI modalias of the captured H200 VM.
func BenchmarkResolve(b *testing.B) {
	aliases := fixtureModaliases(b)
	for _, k := range kernelTrees(b) {
		b.Run(k.kver, func(b *testing.B) {
			for b.Loop() {
				tree, err := LoadTree(k.dir())
				if err != nil {
					b.Fatal(err)
				}
				for _, a := range aliases {
					tree.Resolve(a)
				}
			}
		})
	}
}

// BenchmarkResolveLoaded measures Resolve alone on a loaded tree.
func BenchmarkResolveLoaded(b *testing.B) {
	aliases := fixtureModaliases(b)
	for _, k := range kernelTrees(b) {
		tree := loadKernelTree(b, k)
		b.Run(k.kver, func(b *testing.B) {
			for b.Loop() {
				for _, a := range aliases {
					tree.Resolve(a)
				}
			}
		})
	}
}
