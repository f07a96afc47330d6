// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package gcefake is an in-process fake of the subset of the Compute Engine v1
// REST API that the gcpt4 provider drives through cloud.google.com/go/compute/apiv1.
//
// The fake exists so that provider tests exercise the real Go client (request
// encoding, operation polling, error surfacing) against a world that behaves
// like GCE: zones with and without T4 capacity, quotas, instance templates,
// images, asynchronous operations and the failure shapes GCE produces
// (synchronous googleapi errors, failed operations with and without an HTTP
// status, stockouts with zonesAvailable, quota errors with QuotaInfo).
//
// Its central rule is that it rejects what GCE rejects and accepts what GCE
// accepts. A fake more lenient than GCE lets provider bugs (a missing
// onHostMaintenance TERMINATE, a TDX VM from an image without TDX_CAPABLE, a
// typo in an enum) pass tests and fail in production; one stricter than GCE
// makes the provider send what GCE does not need and hides the shapes it
// could use (N1 custom types with T4s). Each rule cites the Google
// documentation or discovery-document field it comes from, and error
// messages follow GCE's wording where it is known.
//
// Deliberate simplifications are documented next to the code that makes them;
// the most visible ones: quota usage counts every stored instance, including
// those still PROVISIONING or TERMINATED; an instance is visible with status PROVISIONING
// while its insert operation runs and with STOPPING while its delete
// operation runs (lifecycle.go: instances.stop and instances.start, and
// what GCE does on its own, Server.Interrupt and Server.PowerOff, go the
// same way, each recorded as the operation zoneOperations.list shows);
// quota and stockout outcomes are decided when the insert is
// accepted and reported when its operation completes, per zone and
// provisioning model (SetStockout, SetStockoutFor); a single VPC
// ("default") exists; reservations are not modelled: an insert that
// targets a specific reservation is accepted as if it existed. Firewall rules and Cloud
// Routers are added through Server methods (validated as their inserts are)
// and read through the API; Resource Manager's testIamPermissions is served
// at its own /v3 path against a permission set the tests control. Serial
// port output is written by tests (SetSerialOutput, AppendSerialOutput,
// SetBootConsole) and read through getSerialPortOutput with GCE's absolute
// positions and per-port buffer (serial.go).
package gcefake
