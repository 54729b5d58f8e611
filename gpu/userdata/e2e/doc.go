// Package e2e holds the tests of the documented user-data against the
// cloud-init Debian's suites ship: docs/driver-selection.md's #cloud-config
// examples read as kpreload reads them, and checked by `cloud-init schema` of
// bookworm's cloud-init (22.4) and trixie's (25.1) in roots of those suites
// (TestDocumentedUserDataSchema). An end-to-end package: it reaches the build
// side (the archive, mmdebstrap roots) that gpu/ itself must not. It has no
// code outside its tests.
package e2e
