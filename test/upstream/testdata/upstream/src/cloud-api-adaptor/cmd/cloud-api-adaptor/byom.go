//go:build byom

package main

import (
	_ "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/byom"
)
