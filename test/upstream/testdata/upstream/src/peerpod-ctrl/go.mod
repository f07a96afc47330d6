module github.com/confidential-containers/cloud-api-adaptor/src/peerpod-ctrl

go 1.25.13

require github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers v0.0.0-00010101000000-000000000000

replace github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers => ../cloud-providers
