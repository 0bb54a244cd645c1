package dstream

import (
	"context"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// In on-disk mode each stream is one append-only file in the data directory,
// named by the base32hex encoding of its path: injective, and made only of
// characters every file system accepts. A file is a sequence of records, each
// a little-endian uint32 payload length, the payload's CRC-32C, then the
// payload. The first record is the stream's metadata as JSON; each later one
// is one append: the bytes as given or, for a JSON stream, the appended
// messages as a compact JSON array. Reloading replays the appends, so every
// byte position, and with it every offset, is what it was.
const (
	fileSuffix    = ".log"
	tmpSuffix     = ".tmp" // a file being created; complete once renamed
	epochName     = "EPOCH"
	recordHeader  = 8
	formatVersion = 1
)

var (
	fileEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)
	crcTable     = crc32.MakeTable(crc32.Castagnoli)

	// maxPathBytes is the longest stream path whose file name, with the
	// temporary suffix, fits the usual 255-byte limit on a name.
	maxPathBytes = fileEncoding.DecodedLen(255 - len(fileSuffix) - len(tmpSuffix))
)

// disk keeps streams in a directory. Its methods run with memStorage.writeMu
// held, so writes to one file never interleave.
type disk struct {
	dir string
}

// fileMeta is a stream file's first record.
type fileMeta struct {
	Version     int    `json:"v"`
	Path        string `json:"path"`
	ContentType string `json:"contentType"`
}

// errPathNotUTF8 is the loading error of a file that an older release wrote
// for a path that is not valid UTF-8, before such paths were refused.
var errPathNotUTF8 = errors.New("stream path is not valid UTF-8")

// loaded is a stream read back from its file.
type loaded struct {
	path string
	st   *stream
}

func (d *disk) file(path string) string {
	return filepath.Join(d.dir, fileEncoding.EncodeToString([]byte(path))+fileSuffix)
}

// create durably writes the file of a new stream with st's metadata and
// initial contents. The file gets its final name only once complete, so a
// crash never leaves a stream without its metadata.
func (d *disk) create(path string, st *stream) error {
	meta, err := json.Marshal(fileMeta{Version: formatVersion, Path: path, ContentType: st.contentType})
	if err != nil {
		return err
	}
	b := appendRecord(nil, meta)
	if st.tail() > 0 {
		v := st.snapshot()
		b = appendRecord(b, v.body(0))
	}
	name := d.file(path)
	if err := d.replace(name, b); err != nil {
		return err
	}
	st.size = int64(len(b))
	return nil
}

// replace durably makes b the contents of the file name.
func (d *disk) replace(name string, b []byte) error {
	tmp := name + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort; loading removes leftovers too
		return err
	}
	return syncDir(d.dir)
}

// append durably adds a record holding payload to st's file. It writes at
// the end of the last good record rather than wherever the file ends, and
// cuts a failed write back off, so a failure never leaves garbage in front of
// later records.
func (d *disk) append(path string, st *stream, payload []byte) error {
	f, err := os.OpenFile(d.file(path), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	rec := appendRecord(nil, payload)
	_, err = f.WriteAt(rec, st.size)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return errors.Join(err, f.Truncate(st.size), f.Close())
	}
	st.size += int64(len(rec))
	_ = f.Close() // the record is durable; closing cannot undo that
	return nil
}

// remove durably deletes the file of the stream at path. A file already
// gone is not an error, so a retry can complete a delete whose directory
// sync failed.
func (d *disk) remove(path string) error {
	if err := os.Remove(d.file(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(d.dir)
}

// nextEpoch durably increments the directory's run counter. Generations
// start at epoch<<32 in each run, so an ETag never names two versions of a
// stream across restarts.
func (d *disk) nextEpoch() (uint64, error) {
	name := filepath.Join(d.dir, epochName)
	var epoch uint64
	b, err := os.ReadFile(name)
	switch {
	case err == nil:
		// 31 bits, so that epoch<<32 plus a run's creations fits in 64.
		if epoch, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 31); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 0, err
	}
	epoch++
	return epoch, d.replace(name, []byte(strconv.FormatUint(epoch, 10)+"\n"))
}

// load reads every stream in the directory, in file name order, and removes
// files whose creation a crash interrupted.
func (d *disk) load(log *slog.Logger) ([]loaded, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var out []loaded
	for _, e := range entries {
		name := e.Name()
		switch {
		case !e.Type().IsRegular(): // not a file this package writes
		case strings.HasSuffix(name, tmpSuffix):
			if err := os.Remove(filepath.Join(d.dir, name)); err != nil {
				return nil, err
			}
		case strings.HasSuffix(name, fileSuffix):
			l, err := d.loadFile(name, log)
			switch {
			case errors.Is(err, errPathNotUTF8):
				// A stream this server no longer accepts must not keep
				// the others from being served; the file stays.
				log.LogAttrs(context.Background(), slog.LevelError, "dstream: skipping a stream whose path is not valid UTF-8, written by an older release",
					slog.String("file", filepath.Join(d.dir, name)))
				continue
			case err != nil:
				return nil, fmt.Errorf("dstream: loading %s: %w", filepath.Join(d.dir, name), err)
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// loadFile replays one stream file. Records after the first one that is
// incomplete or fails its checksum, which is what a crash mid-write leaves,
// are cut off the file and never served. A damaged metadata record cannot
// come from a crash, as creation renames a complete file into place, so it
// is an error.
func (d *disk) loadFile(name string, log *slog.Logger) (loaded, error) {
	full := filepath.Join(d.dir, name)
	b, err := os.ReadFile(full)
	if err != nil {
		return loaded{}, err
	}
	meta, rest, ok := nextRecord(b)
	if !ok {
		return loaded{}, errors.New("no intact metadata record")
	}
	var m fileMeta
	if err := json.Unmarshal(meta, &m); err != nil {
		return loaded{}, fmt.Errorf("metadata: %w", err)
	}
	if m.Version != formatVersion {
		return loaded{}, fmt.Errorf("unknown format version %d", m.Version)
	}
	if d.file(m.Path) != full {
		// JSON wrote such a path with U+FFFD in place of its bad bytes;
		// the file name still holds them.
		if p, err := fileEncoding.DecodeString(strings.TrimSuffix(name, fileSuffix)); err == nil && !utf8.Valid(p) {
			return loaded{}, errPathNotUTF8
		}
		return loaded{}, fmt.Errorf("file holds stream %q, which belongs in another file", m.Path)
	}
	st, err := newStream(m.ContentType)
	if err != nil {
		return loaded{}, fmt.Errorf("metadata: %w", err)
	}
	for {
		payload, next, ok := nextRecord(rest)
		if !ok || !st.replay(payload) {
			break
		}
		rest = next
	}
	st.size = int64(len(b) - len(rest))
	if len(rest) > 0 {
		log.LogAttrs(context.Background(), slog.LevelWarn, "dstream: cutting off a torn or corrupt tail",
			slog.String("path", m.Path), slog.Int("bytes", len(rest)))
		if err := truncateSync(full, st.size); err != nil {
			return loaded{}, err
		}
	}
	return loaded{path: m.Path, st: st}, nil
}

// replay applies one append record to st, reporting false for a payload
// that no append could have written.
func (st *stream) replay(payload []byte) bool {
	if !st.json {
		if len(payload) == 0 {
			return false
		}
		st.appendBytes(payload)
		return true
	}
	msgs, err := jsonMessages(payload)
	if err != nil || len(msgs) == 0 {
		return false
	}
	st.appendMessages(msgs)
	return true
}

func appendRecord(b, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, crcTable))
	return append(b, payload...)
}

// nextRecord splits the first record off b, reporting false if b does not
// start with a complete record whose checksum matches.
func nextRecord(b []byte) (payload, rest []byte, ok bool) {
	if len(b) < recordHeader {
		return nil, b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-recordHeader) {
		return nil, b, false
	}
	payload = b[recordHeader : recordHeader+int(n)]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, b, false
	}
	return payload, b[recordHeader+int(n):], true
}

func truncateSync(name string, size int64) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
