package trafficgen

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Large incompressible messages (issue 17, not a seed paper): a document
// service on ASP.NET that answers GetDocument with the document's bytes
// inline, one xsd:base64Binary element (a byte[] result; Axis2 without
// MTOM sends the same). The documents are already compressed (PDF
// streams, JPEG scans, Office zip files), modelled as pseudo-random bytes
// behind the format's magic number, so the base64 is all a codec can take
// away: a quarter of the bytes at best.

// docNS is the document service's namespace.
const docNS = "http://docs.example.com/DocumentService/"

type docKind struct{ ext, contentType, magic string }

var docKinds = []docKind{
	{"pdf", "application/pdf", "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"},
	{"pdf", "application/pdf", "%PDF-1.6\n%\xe2\xe3\xcf\xd3\n"},
	{"jpg", "image/jpeg", "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01"},
	{"tif", "image/tiff", "II*\x00"},
	{"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "PK\x03\x04\x14\x00\x06\x00"},
}

var (
	docSeries = []string{"INV", "PO", "CTR", "SCAN", "DN", "HR"}
	docUsers  = []string{`CORP\jsmith`, `CORP\mmueller`, `CORP\akowalski`, `CORP\lnguyen`, `CORP\pdubois`, `CORP\svc-archive`}
)

// attachments returns the generator of a document service whose responses
// are about size bytes (uniform within ±5 %). One call is one document:
// a request naming its id, a response with its metadata and content.
func attachments(size int) func(n int, r *rand.Rand) []Message {
	return func(n int, r *rand.Rand) []Message {
		modified := time.Date(2009, 3, 2, 8, 0, 0, 0, time.FixedZone("CET", 3600))
		serial := 1000 + r.IntN(9000)
		var raw []byte // the document's bytes, reused from call to call
		return pairs(n, func(int) (Message, Message) {
			d := document{
				id:       guid(r),
				version:  1 + r.IntN(4),
				kind:     pick(r, docKinds),
				modified: modified,
			}
			d.name = fmt.Sprintf("%s-2009-%06d", pick(r, docSeries), serial)
			modified = modified.Add(time.Duration(1+r.IntN(240)) * time.Minute)
			serial += 1 + r.IntN(40)
			user := pick(r, docUsers)

			target := size - size/20 + r.IntN(size/10+1)
			raw = d.content(r, raw, target)
			return Message{Name: "GetDocument", Body: documentRequest(d, user)},
				Message{Name: "GetDocumentResponse", Body: d.response(raw)}
		})
	}
}

// document is the metadata of one stored document.
type document struct {
	id, name string
	version  int
	kind     docKind
	modified time.Time
}

func documentRequest(d document, user string) []byte {
	return []byte(dotnetHead +
		`<GetDocument xmlns="` + docNS + `"><documentId>` + d.id + `</documentId>` +
		`<version>` + strconv.Itoa(d.version) + `</version>` +
		`<requestedBy>` + esc(user) + `</requestedBy></GetDocument>` + dotnetTail)
}

// responseHead is the response up to the base64 content, for a document of
// length bytes.
func (d document) responseHead(length int) string {
	return dotnetHead +
		`<GetDocumentResponse xmlns="` + docNS + `"><GetDocumentResult>` +
		`<DocumentId>` + d.id + `</DocumentId><Version>` + strconv.Itoa(d.version) + `</Version>` +
		`<FileName>` + d.name + "." + d.kind.ext + `</FileName><ContentType>` + d.kind.contentType + `</ContentType>` +
		`<Length>` + strconv.Itoa(length) + `</Length>` +
		`<Modified>` + d.modified.Format("2006-01-02T15:04:05-07:00") + `</Modified><Content>`
}

const documentResponseTail = `</Content></GetDocumentResult></GetDocumentResponse>` + dotnetTail

// content fills buf (grown as needed) with the document's bytes: its
// format's magic number, then pseudo-random bytes, as many as make the
// response about target bytes long.
func (d document) content(r *rand.Rand, buf []byte, target int) []byte {
	// The length's digits are part of the envelope: estimate them from the
	// target (the same count over the ±5 % range).
	over := len(d.responseHead(target*3/4)) + len(documentResponseTail)
	n := max(len(d.kind.magic), (target-over)/4*3)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	rest := buf[copy(buf, d.kind.magic):]
	for len(rest) >= 8 {
		binary.LittleEndian.PutUint64(rest, r.Uint64())
		rest = rest[8:]
	}
	if len(rest) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(rest, w[:])
	}
	return buf
}

// response writes the whole response in one allocation of its final size.
func (d document) response(raw []byte) []byte {
	head := d.responseHead(len(raw))
	b := make([]byte, 0, len(head)+base64.StdEncoding.EncodedLen(len(raw))+len(documentResponseTail))
	b = append(b, head...)
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, documentResponseTail...)
}

// guid draws a version 4 GUID, as .NET's Guid.NewGuid writes it.
func guid(r *rand.Rand) string {
	hi, lo := r.Uint64(), r.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
		hi>>32, (hi>>16)&0xffff, hi&0xfff, 0x8000|(lo>>48)&0x3fff, lo&0xffff_ffff_ffff)
}
