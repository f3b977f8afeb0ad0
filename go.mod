module rdmafs

go 1.26.0

require golang.org/x/sys v0.50.0

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/spf13/pflag v1.1.0
)

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0
)
