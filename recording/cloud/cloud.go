// Package cloud links the object-storage store (recording/blobstore) with
// the drivers of gocloud.dev/blob for s3://, gs:// and azblob://, and
// registers those schemes with recording.Open. Import it for its side
// effect where cloud buckets are wanted, in the service that records
// (beside the agent's blank import) or in a tool:
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

	"github.com/retrace-dev/retrace/recording/blobstore"
)

func init() { blobstore.Register("s3", "gs", "azblob") }
