module github.com/caa-gcp-t4/gcp-t4

go 1.26

require github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers v0.0.0

replace github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers => ../src/cloud-providers
