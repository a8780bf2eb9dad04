// Package cloud registers the object-storage drivers of gocloud.dev/blob
// (s3://, gs://, azblob://) with recording.Open. Import it for its side
// effect where cloud buckets are wanted:
//
//	import _ "github.com/retrace-dev/retrace/recording/cloud"
//
// It is separate from package recording because the three cloud SDKs add
// tens of megabytes to every binary that links them.
package cloud

import (
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/s3blob"    // s3://
)
