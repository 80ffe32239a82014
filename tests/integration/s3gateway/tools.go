//go:build tools

// Package tools pins versitygw, the S3-compatible server the object-storage checkpoint tests
// run on 127.0.0.1 (Apache-2.0; its posix backend keeps each object as a file).
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
