// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package catalog is what the gcpt4 provider knows about Compute Engine's
// shapes, with no GCE call and none of the provider's configuration but
// the profile documents it is given: the GPU families (one row each), the
// machine types and series and the rules GCE applies to them, the profiles
// an admin names, the cited price table, and the offerings a request's
// selection tries, ranked by price (Karpenter's model: instance types,
// requirements, offerings).
//
// It is a leaf beside the provider so that the provider's package exports
// what Cloud API Adaptor calls, while the operator tools (plan, fit,
// preflight) read the same catalogue instead of copying it. It does not
// import gcpt4; gcpt4 imports it and decides, from its configuration,
// which of these shapes a pod may get.
package catalog
