// Package controllers is a stand-in for upstream's peer-pod controller: it
// deletes a dangling podVM through the provider its PeerPod names, so only
// providers linked in here can be cleaned up.
package controllers

import (
	"context"
	"fmt"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

// DeleteDangling deletes instanceID with the named provider.
func DeleteDangling(ctx context.Context, cloudProvider, instanceID string) error {
	cloud := provider.Get(cloudProvider)
	if cloud == nil {
		return fmt.Errorf("provider %q is not linked into the controller", cloudProvider)
	}
	p, err := cloud.NewProvider()
	if err != nil {
		return err
	}
	return p.DeleteInstance(ctx, instanceID)
}
