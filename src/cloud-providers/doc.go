// Package provider is caa-gcp-t4's fork of the Cloud API Adaptor's
// cloud-providers module. It holds only the part of upstream's API that the
// gcpt4 provider uses, with upstream's exact exported names and signatures,
// so that gcpt4 builds unchanged against either tree.
package provider
