//go:build !amd64

package fwcfg

func withPorts(func(Device) error) error { return ErrUnsupported }
