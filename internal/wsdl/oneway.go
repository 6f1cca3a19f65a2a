// Package wsdl reads what soapgw needs from a service's WSDL 1.1 description: which
// operations are one-way (an input and no output), and how a request to each is told
// apart on the wire (the first element in the SOAP Body, the SOAPAction). The edge
// acknowledges exactly those operations at once from its spool (edge.one_way), so an
// operator can point it at the WSDL instead of listing them by hand.
//
// Only WSDL 1.1 (what Axis, .NET, gSOAP, CXF and spyne publish) is read, from one
// document: wsdl:import and xsd includes are not followed, and an operation whose
// messages live in an imported document is reported as an error rather than guessed.
package wsdl

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MaxSize bounds the WSDL document read.
const MaxSize = 16 << 20

// Operation is a one-way operation of a WSDL, as a request to it looks on the wire.
type Operation struct {
	// Name is the portType operation's name.
	Name string
	// BodyElement is the local name of the first element in the SOAP Body of its
	// requests: the input message part's element (document style) or the operation's
	// name (rpc style).
	BodyElement string
	// Action is the SOAPAction of its binding, if that tells it apart from another
	// operation with the same BodyElement; otherwise empty (the body element alone
	// identifies it, as WS-I Basic Profile requires).
	Action string
}

// ErrNotWSDL is returned for a document that is not a WSDL 1.1 definitions element.
var ErrNotWSDL = errors.New("wsdl: not a WSDL 1.1 document (wsdl:definitions)")

type definitions struct {
	XMLName   xml.Name   `xml:"http://schemas.xmlsoap.org/wsdl/ definitions"`
	Messages  []message  `xml:"http://schemas.xmlsoap.org/wsdl/ message"`
	PortTypes []portType `xml:"http://schemas.xmlsoap.org/wsdl/ portType"`
	Bindings  []binding  `xml:"http://schemas.xmlsoap.org/wsdl/ binding"`
}

type message struct {
	Name  string `xml:"name,attr"`
	Parts []struct {
		Element string `xml:"element,attr"`
		Type    string `xml:"type,attr"`
	} `xml:"http://schemas.xmlsoap.org/wsdl/ part"`
}

type portType struct {
	Name       string   `xml:"name,attr"`
	Operations []portOp `xml:"http://schemas.xmlsoap.org/wsdl/ operation"`
}

type portOp struct {
	Name   string `xml:"name,attr"`
	Input  *ioMsg `xml:"http://schemas.xmlsoap.org/wsdl/ input"`
	Output *ioMsg `xml:"http://schemas.xmlsoap.org/wsdl/ output"`
}

type ioMsg struct {
	Message string `xml:"message,attr"`
}

type soapBinding struct {
	Style string `xml:"style,attr"`
}

type soapOperation struct {
	Action string `xml:"soapAction,attr"`
	Style  string `xml:"style,attr"`
}

type binding struct {
	Type       string        `xml:"type,attr"`
	SOAP11     []soapBinding `xml:"http://schemas.xmlsoap.org/wsdl/soap/ binding"`
	SOAP12     []soapBinding `xml:"http://schemas.xmlsoap.org/wsdl/soap12/ binding"`
	Operations []struct {
		Name   string          `xml:"name,attr"`
		SOAP11 []soapOperation `xml:"http://schemas.xmlsoap.org/wsdl/soap/ operation"`
		SOAP12 []soapOperation `xml:"http://schemas.xmlsoap.org/wsdl/soap12/ operation"`
	} `xml:"http://schemas.xmlsoap.org/wsdl/ operation"`
}

// wireOp is one operation of a SOAP binding, as its requests look.
type wireOp struct {
	name, element, action string
	oneWay                bool
}

// OneWay returns the one-way operations of a WSDL 1.1 document, in document order,
// each once. It fails on a document that is not WSDL 1.1, on a one-way operation whose
// requests cannot be told from another operation's, and when there is none.
func OneWay(doc []byte) ([]Operation, error) {
	if len(doc) > MaxSize {
		return nil, fmt.Errorf("wsdl: document of %d bytes, more than %d", len(doc), MaxSize)
	}
	var d definitions
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	if err := dec.Decode(&d); err != nil {
		if strings.Contains(err.Error(), "expected element type <definitions>") {
			return nil, ErrNotWSDL
		}
		return nil, fmt.Errorf("wsdl: %w", err)
	}
	if err := trailing(dec); err != nil {
		return nil, err
	}
	ops, err := d.wireOps()
	if err != nil {
		return nil, err
	}
	var out []Operation
	for _, op := range ops {
		if !op.oneWay {
			continue
		}
		o := Operation{Name: op.name, BodyElement: op.element}
		for _, other := range ops {
			if other.element == op.element && other.name != op.name {
				if op.action == "" || op.action == other.action {
					return nil, fmt.Errorf("wsdl: one-way operation %s cannot be told from operation %s: both send a Body element %s, and their SOAPActions (%q, %q) do not differ", op.name, other.name, op.element, op.action, other.action)
				}
				o.Action = op.action
			}
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("wsdl: no one-way operation (an input without an output) in a SOAP binding")
	}
	return out, nil
}

// trailing fails if anything but whitespace, comments or processing instructions
// follows the definitions element.
func trailing(dec *xml.Decoder) error {
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("wsdl: after the definitions element: %w", err)
		}
		switch t := tok.(type) {
		case xml.Comment, xml.ProcInst:
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return errors.New("wsdl: text after the definitions element")
			}
		default:
			return errors.New("wsdl: content after the definitions element")
		}
	}
}

// wireOps lists the operations of every SOAP binding with their body element and action.
func (d *definitions) wireOps() ([]wireOp, error) {
	var out []wireOp
	for _, b := range d.Bindings {
		bstyle := ""
		switch {
		case len(b.SOAP11) > 0:
			bstyle = b.SOAP11[0].Style
		case len(b.SOAP12) > 0:
			bstyle = b.SOAP12[0].Style
		default:
			continue // an HTTP or MIME binding: no SOAP requests
		}
		pt := d.portType(local(b.Type))
		if pt == nil {
			return nil, fmt.Errorf("wsdl: binding of portType %s, which this document does not define (imports are not followed)", b.Type)
		}
		for _, bop := range b.Operations {
			style, action := bstyle, ""
			for _, so := range append(bop.SOAP11, bop.SOAP12...) {
				action = so.Action
				if so.Style != "" {
					style = so.Style
				}
			}
			i := slices.IndexFunc(pt.Operations, func(o portOp) bool { return o.Name == bop.Name })
			if i < 0 {
				return nil, fmt.Errorf("wsdl: binding operation %s is not in portType %s", bop.Name, pt.Name)
			}
			pop := pt.Operations[i]
			if pop.Input == nil {
				continue // a notification (output only): the server sends it, no request
			}
			op := wireOp{name: pop.Name, action: action, oneWay: pop.Output == nil, element: pop.Name}
			if style != "rpc" {
				el, err := d.inputElement(pop.Name, pop.Input.Message)
				if err != nil {
					return nil, err
				}
				op.element = el
			}
			if op.element == "" || strings.ContainsAny(op.element, ": \t\r\n") {
				return nil, fmt.Errorf("wsdl: operation %q: no valid body element name", pop.Name)
			}
			out = append(out, op)
		}
	}
	return out, nil
}

// inputElement is the body element of a document-style operation's input message.
func (d *definitions) inputElement(op, msg string) (string, error) {
	for _, m := range d.Messages {
		if m.Name != local(msg) {
			continue
		}
		if len(m.Parts) == 0 || m.Parts[0].Element == "" {
			return "", fmt.Errorf("wsdl: document-style operation %s: its input message %s has no part with an element", op, m.Name)
		}
		return local(m.Parts[0].Element), nil
	}
	return "", fmt.Errorf("wsdl: operation %s: input message %s is not defined in this document (imports are not followed)", op, msg)
}

func (d *definitions) portType(name string) *portType {
	for i := range d.PortTypes {
		if d.PortTypes[i].Name == name {
			return &d.PortTypes[i]
		}
	}
	return nil
}

// local strips a QName's prefix.
func local(qname string) string {
	if _, l, ok := strings.Cut(qname, ":"); ok {
		return l
	}
	return qname
}
