module github.com/caa-gcp-t4/install

go 1.26.0
