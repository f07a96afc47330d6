module github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers

go 1.25.13

require (
	cloud.google.com/go/compute v1.64.0
	google.golang.org/api v0.279.0
	google.golang.org/protobuf v1.36.11
	gopkg.in/yaml.v2 v2.4.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/googleapis/gax-go/v2 v2.22.0 // indirect
)
