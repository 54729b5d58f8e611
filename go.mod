module github.com/kpreload/kpreload

go 1.26.0

require (
	github.com/cavaliergopher/cpio v1.0.1
	github.com/klauspost/compress v1.20.3
	github.com/spf13/cobra v1.10.2
	github.com/u-root/u-root v0.16.0
	github.com/ulikunitz/xz v0.5.17
	golang.org/x/sys v0.49.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/rekby/gpt v0.0.0-20200219180433-a930afbc6edc // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
