//go:build gcp

package main

import (
	_ "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcp"
)
