//go:build byom

package controllers

import (
	_ "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/byom"
)
