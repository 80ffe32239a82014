module edl.local/s3gateway

go 1.25.0

require github.com/versity/versitygw v1.8.0
