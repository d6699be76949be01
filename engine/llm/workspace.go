package llm

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"homework/engine/spec"
)

const (
	scratchpadPath   = "scratchpad.md"
	scratchpadFolder = "scratchpad"
	iterationsFolder = "iterations"
	branchesFolder   = "branches"
	notesFolder      = "notes"
	planPath         = "plan.md"
	maxPathLen       = 200
)

// cleanPath normalises a workspace path given by the model: slashes only,
// no leading "/" or "/homework/<run>/" prefix, no "." or ".." segments.
func cleanPath(runID, p string) (string, error) {
	p = strings.TrimSpace(strings.ReplaceAll(p, "\\", "/"))
	p = strings.TrimPrefix(p, "/homework/"+runID+"/")
	p = strings.TrimPrefix(p, "homework/"+runID+"/")
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", toolErrorf("path %q may not contain \"..\"", p)
		}
	}
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" || p == "." {
		return "", toolErrorf("path is empty; give a path such as notes/findings.md")
	}
	if len(p) > maxPathLen {
		return "", toolErrorf("path is longer than %d characters", maxPathLen)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "", toolErrorf("path contains control characters")
		}
	}
	return p, nil
}

// ensureParents creates the folders above p that are missing (kind folder,
// each in the tree) and returns the id of p's parent. New documents are
// appended to *created and get their document_created events. It looks
// for the nearest existing folder from p up, so a document in a folder
// that exists (every summary after the first) costs one lookup; the root
// is looked up (and made when missing) only when no folder above p exists.
func ensureParents(ctx context.Context, tx spec.Tx, runID, objective, p string, iteration int, created *[]*spec.Document) (string, error) {
	segs := strings.Split(p, "/")
	parent, have := "", 0 // have: how many leading segments exist as a folder
	for i := len(segs) - 1; i >= 1; i-- {
		d, err := tx.FindDocumentByPath(ctx, runID, strings.Join(segs[:i], "/"))
		if err == nil {
			parent, have = d.ID, i
			break
		} else if spec.ErrorCode(err) != spec.ENOTFOUND {
			return "", err
		}
	}
	if have == 0 {
		root, err := ensureRoot(ctx, tx, runID, objective, created)
		if err != nil {
			return "", err
		}
		parent = root.ID
	}
	for i := have + 1; i < len(segs); i++ {
		dir := strings.Join(segs[:i], "/")
		d := &spec.Document{RunID: runID, ParentID: parent, Path: dir, Kind: spec.DocFolder, Title: segs[i-1], Iteration: iteration}
		if _, err := tx.PutDocument(ctx, d); err != nil {
			return "", fmt.Errorf("create folder %s: %w", dir, err)
		}
		if _, err := tx.AppendEvent(ctx, runID, spec.EventDocumentCreated, docEvent(d)); err != nil {
			return "", err
		}
		*created = append(*created, d)
		parent = d.ID
	}
	return parent, nil
}

// putDoc creates or updates the document at doc.Path, with its folders, in
// one transaction with its events, and records it in the artifacts.
func (it *iteration) putDoc(ctx context.Context, doc *spec.Document) (created bool, err error) {
	var folders []*spec.Document
	err = it.writeTx(ctx, func(tx spec.Tx) error {
		var err error
		created, folders, err = it.putDocTx(ctx, tx, doc)
		return err
	})
	if err != nil {
		return false, err
	}
	it.noteDocs(folders, doc, created)
	return created, nil
}

// putDocTx creates or updates the document at doc.Path, with its folders
// (returned), in tx with their events. A document over a folder is refused
// with a tool error, after its parents were ensured: those exist already
// when doc.Path is a folder, so the refusal has written nothing.
func (it *iteration) putDocTx(ctx context.Context, tx spec.Tx, doc *spec.Document) (created bool, folders []*spec.Document, err error) {
	doc.RunID, doc.Iteration = it.in.RunID, it.in.Iteration
	if doc.ParentID, err = ensureParents(ctx, tx, it.in.RunID, it.cfg.Objective, doc.Path, it.in.Iteration, &folders); err != nil {
		return false, nil, err
	}
	if existing, err := tx.FindDocumentByPath(ctx, it.in.RunID, doc.Path); err == nil && existing.Kind == spec.DocFolder && doc.Kind != spec.DocFolder && doc.Kind != spec.DocBranch {
		return false, nil, toolErrorf("%s is a folder; write a document inside it, such as %s/notes.md", doc.Path, doc.Path)
	}
	if created, err = tx.PutDocument(ctx, doc); err != nil {
		return false, nil, err
	}
	typ := spec.EventDocumentUpdated
	if created {
		typ = spec.EventDocumentCreated
	}
	_, err = tx.AppendEvent(ctx, it.in.RunID, typ, docEvent(doc))
	return created, folders, err
}

// noteDocs records a document written and the folders created for it in
// the artifacts.
func (it *iteration) noteDocs(folders []*spec.Document, doc *spec.Document, created bool) {
	for _, f := range folders {
		it.noteDoc(f, true)
	}
	it.noteDoc(doc, created)
}

var headingRE = regexp.MustCompile(`(?m)^##+ (.+)$`)

// appendScratchpad appends a section to scratchpad.md, rolling the old
// content over into scratchpad/NNN.md first when the result would pass the
// size bound. The new scratchpad starts with a deterministic, bounded
// summary of what was archived.
func (it *iteration) appendScratchpad(ctx context.Context, heading, text string) (string, error) {
	limit := it.e.opts.ScratchpadMaxBytes
	heading = truncate(oneLine(heading), 120)
	if heading == "" {
		heading = "notes"
	}
	section := fmt.Sprintf("\n## Iteration %d — %s\n\n%s\n", it.in.Iteration, heading, strings.TrimSpace(text))
	if len(section) > limit/2 {
		section = truncate(section, limit/2) + "\n"
	}
	var docs []*spec.Document
	var archived string
	var spDoc *spec.Document
	var spCreated bool
	err := it.writeTx(ctx, func(tx spec.Tx) error {
		docs, archived = docs[:0], ""
		sp, err := tx.FindDocumentByPath(ctx, it.in.RunID, scratchpadPath)
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			sp = &spec.Document{Path: scratchpadPath, Kind: spec.DocScratchpad, Title: "Scratchpad", Content: "# Scratchpad\n"}
		} else if err != nil {
			return err
		}
		content := sp.Content + section
		if len(content) > limit {
			if archived, err = it.archiveScratchpad(ctx, tx, sp, &docs); err != nil {
				return err
			}
			content = rolloverSummary(sp.Content, archived) + section
		}
		parent, err := ensureParents(ctx, tx, it.in.RunID, it.cfg.Objective, scratchpadPath, it.in.Iteration, &docs)
		if err != nil {
			return err
		}
		sp.RunID, sp.ParentID, sp.Content, sp.Iteration, sp.Kind = it.in.RunID, parent, content, it.in.Iteration, spec.DocScratchpad
		created, err := tx.PutDocument(ctx, sp)
		if err != nil {
			return err
		}
		typ := spec.EventDocumentUpdated
		if created {
			typ = spec.EventDocumentCreated
		}
		if _, err := tx.AppendEvent(ctx, it.in.RunID, typ, docEvent(sp)); err != nil {
			return err
		}
		spDoc, spCreated = sp, created
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, d := range docs {
		it.noteDoc(d, true)
	}
	it.noteDoc(spDoc, spCreated)
	if archived != "" {
		return fmt.Sprintf("appended to %s; the scratchpad was full, so its earlier notes were archived to %s", scratchpadPath, archived), nil
	}
	return "appended to " + scratchpadPath, nil
}

// archiveScratchpad copies the notes of the full scratchpad sp to the next
// scratchpad/NNN.md in tx, adds the archive and any folder it creates to
// docs, and returns the archive's path.
func (it *iteration) archiveScratchpad(ctx context.Context, tx spec.Tx, sp *spec.Document, docs *[]*spec.Document) (string, error) {
	all, err := tx.ListRunDocuments(ctx, it.in.RunID)
	if err != nil {
		return "", err
	}
	n := 1
	for _, d := range all {
		if strings.HasPrefix(d.Path, scratchpadFolder+"/") {
			n++
		}
	}
	archived := fmt.Sprintf("%s/%03d.md", scratchpadFolder, n)
	arch := &spec.Document{RunID: it.in.RunID, Path: archived, Kind: spec.DocScratchpad, Iteration: it.in.Iteration,
		Title: fmt.Sprintf("Scratchpad archive %03d", n), Description: "Earlier scratchpad notes.", Content: sp.Content}
	if arch.ParentID, err = ensureParents(ctx, tx, it.in.RunID, it.cfg.Objective, archived, it.in.Iteration, docs); err != nil {
		return "", err
	}
	if _, err := tx.PutDocument(ctx, arch); err != nil {
		return "", err
	}
	if _, err := tx.AppendEvent(ctx, it.in.RunID, spec.EventDocumentCreated, docEvent(arch)); err != nil {
		return "", err
	}
	*docs = append(*docs, arch)
	return archived, nil
}

// rolloverSummary is the head of a fresh scratchpad: where the old notes
// went and their last headings, bounded.
func rolloverSummary(old, archived string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scratchpad\n\n_Earlier notes (%d bytes) were archived to %s; read it for details._\n", len(old), archived)
	hs := headingRE.FindAllStringSubmatch(old, -1)
	if len(hs) > 0 {
		b.WriteString("\nArchived sections:\n")
		if len(hs) > 15 {
			fmt.Fprintf(&b, "- … %d earlier sections\n", len(hs)-15)
			hs = hs[len(hs)-15:]
		}
		for _, h := range hs {
			b.WriteString("- " + truncate(h[1], 100) + "\n")
		}
	}
	return b.String()
}

// noteDoc records a document in the iteration's artifacts. A document
// created this iteration stays under Created when later updated. Folders
// are part of the tree but not listed as artifacts.
func (it *iteration) noteDoc(d *spec.Document, created bool) {
	if d.Kind == spec.DocFolder {
		return
	}
	it.noteRef(spec.Ref{Type: "document", ID: d.ID, Title: d.Title, Path: d.Path}, created)
}

func (it *iteration) noteTask(t *spec.Task, created bool) {
	it.noteRef(spec.Ref{Type: "task", ID: t.ID, Title: t.Title}, created)
}

func (it *iteration) noteRef(r spec.Ref, created bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	key := r.Type + ":" + r.ID
	if where, ok := it.refs[key]; ok {
		// Keep the latest title; never move a created object to Updated.
		list := it.res.Artifacts.Updated
		if where.created {
			list = it.res.Artifacts.Created
		}
		list[where.index] = r
		return
	}
	if created {
		it.res.Artifacts.Created = append(it.res.Artifacts.Created, r)
		it.refs[key] = refPos{created: true, index: len(it.res.Artifacts.Created) - 1}
	} else {
		it.res.Artifacts.Updated = append(it.res.Artifacts.Updated, r)
		it.refs[key] = refPos{index: len(it.res.Artifacts.Updated) - 1}
	}
}

type refPos struct {
	created bool
	index   int
}
