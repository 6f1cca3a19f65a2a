package trafficgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Tere, Mudholkar and Jadhav (seed 002): an ASP.NET web service method
// getorders returning the Northwind Orders table as a DataSet (inline
// xs:schema plus diffgram). The paper varies 300-830 rows; all 830 rows
// come to about 454 KB.

type customer struct{ id, name, addr, city, region, postal, country string }

var customers = []customer{
	{"VINET", "Vins et alcools Chevalier", "59 rue de l'Abbaye", "Reims", "", "51100", "France"},
	{"TOMSP", "Toms Spezialitäten", "Luisenstr. 48", "Münster", "", "44087", "Germany"},
	{"HANAR", "Hanari Carnes", "Rua do Paço, 67", "Rio de Janeiro", "RJ", "05454-876", "Brazil"},
	{"VICTE", "Victuailles en stock", "2, rue du Commerce", "Lyon", "", "69004", "France"},
	{"SUPRD", "Suprêmes délices", "Boulevard Tirou, 255", "Charleroi", "", "B-6000", "Belgium"},
	{"CHOPS", "Chop-suey Chinese", "Hauptstr. 31", "Bern", "", "3012", "Switzerland"},
	{"RICSU", "Richter Supermarkt", "Starenweg 5", "Genève", "", "1204", "Switzerland"},
	{"WELLI", "Wellington Importadora", "Rua do Mercado, 12", "Resende", "SP", "08737-363", "Brazil"},
	{"HILAA", "HILARION-Abastos", "Carrera 22 con Ave. Carlos Soublette #8-35", "San Cristóbal", "Táchira", "5022", "Venezuela"},
	{"ERNSH", "Ernst Handel", "Kirchgasse 6", "Graz", "", "8010", "Austria"},
	{"CENTC", "Centro comercial Moctezuma", "Sierras de Granada 9993", "México D.F.", "", "05022", "Mexico"},
	{"OLDWO", "Old World Delicatessen", "2743 Bering St.", "Anchorage", "AK", "99508", "USA"},
	{"QUEDE", "Que Delícia", "Rua da Panificadora, 12", "Rio de Janeiro", "RJ", "02389-673", "Brazil"},
	{"RATTC", "Rattlesnake Canyon Grocery", "2817 Milton Dr.", "Albuquerque", "NM", "87110", "USA"},
	{"FOLKO", "Folk och fä HB", "Åkergatan 24", "Bräcke", "", "S-844 67", "Sweden"},
	{"BLONP", "Blondel père et fils", "24, place Kléber", "Strasbourg", "", "67000", "France"},
	{"SEVES", "Seven Seas Imports", "90 Wadhurst Rd.", "London", "", "OX15 4NB", "UK"},
	{"LILAS", "LILA-Supermercado", "Carrera 52 con Ave. Bolívar #65-98 Llano Largo", "Barquisimeto", "Lara", "3508", "Venezuela"},
}

var ordersColumns = []struct{ name, typ string }{
	{"OrderID", "xs:int"}, {"CustomerID", "xs:string"}, {"EmployeeID", "xs:int"},
	{"OrderDate", "xs:dateTime"}, {"RequiredDate", "xs:dateTime"}, {"ShippedDate", "xs:dateTime"},
	{"ShipVia", "xs:int"}, {"Freight", "xs:decimal"}, {"ShipName", "xs:string"},
	{"ShipAddress", "xs:string"}, {"ShipCity", "xs:string"}, {"ShipRegion", "xs:string"},
	{"ShipPostalCode", "xs:string"}, {"ShipCountry", "xs:string"},
}

const dotnetHead = `<?xml version="1.0" encoding="utf-8"?>` +
	`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"` +
	` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"` +
	` xmlns:xsd="http://www.w3.org/2001/XMLSchema"><soap:Body>`

const dotnetTail = `</soap:Body></soap:Envelope>`

// northwind serves the same Orders table call after call, as the
// paper's service did: each response is its first 300-830 rows (the
// paper's "varying number of records"). Between calls the table lives a
// little, as a production table does: a pending order ships, a freight
// charge is corrected.
func northwind(n int, r *rand.Rand) []Message {
	orders := newOrdersTable(r, 830)
	return pairs(n, func(int) (Message, Message) {
		orders.evolve(r)
		rows := 300 + r.IntN(531) // 300..830
		req := dotnetHead + `<getorders xmlns="http://tempuri.org/" />` + dotnetTail
		return Message{Name: "getorders", Body: []byte(req)},
			Message{Name: "getordersResponse", Body: ordersDataSet(orders.rows[:rows])}
	})
}

// northwindLarge is northwind with a table of 6,500 orders, each response its first
// 4,100-6,500 rows: 2.2-3.5 MB, the DataSet-style responses issue 19 measured.
func northwindLarge(n int, r *rand.Rand) []Message {
	orders := newOrdersTable(r, 6500)
	return pairs(n, func(int) (Message, Message) {
		orders.evolve(r)
		rows := 4100 + r.IntN(2401) // 4100..6500
		req := dotnetHead + `<getorders xmlns="http://tempuri.org/" />` + dotnetTail
		return Message{Name: "getorders", Body: []byte(req)},
			Message{Name: "getordersResponse", Body: ordersDataSet(orders.rows[:rows])}
	})
}

// order is one row of the Orders table.
type order struct {
	id, employee, shipVia int
	cust                  *customer
	ordered, required     time.Time
	shipped               time.Time // zero: not shipped yet
	freightCents          int
}

type ordersTable struct{ rows []order }

// newOrdersTable draws the table once: order ids from 10248, one to two
// days between orders, the most recent 20 mostly not shipped yet.
// .NET writes DataSet dates in the server's local time with its offset;
// this server runs in India (+05:30).
func newOrdersTable(r *rand.Rand, n int) *ordersTable {
	t := &ordersTable{rows: make([]order, n)}
	date := time.Date(1996, 7, 4, 0, 0, 0, 0, time.FixedZone("IST", 5*3600+30*60))
	for i := range t.rows {
		o := &t.rows[i]
		o.id = 10248 + i
		o.cust = &customers[r.IntN(len(customers))]
		o.employee = 1 + r.IntN(9)
		o.ordered = date
		o.required = date.AddDate(0, 0, pick(r, []int{14, 28, 28, 28, 42}))
		if i < n-20 || r.IntN(3) == 0 {
			o.shipped = date.AddDate(0, 0, 1+r.IntN(36))
		}
		o.shipVia = 1 + r.IntN(3)
		o.freightCents = 100*r.IntN(r.IntN(1000)+1) + r.IntN(100)
		date = date.AddDate(0, 0, r.IntN(2)+r.IntN(2))
	}
	return t
}

// evolve applies what happens to the table between two calls: half the
// time a pending order ships, a quarter of the time a freight charge is
// corrected.
func (t *ordersTable) evolve(r *rand.Rand) {
	if r.IntN(2) == 0 {
		for i := range t.rows {
			if o := &t.rows[i]; o.shipped.IsZero() {
				o.shipped = o.ordered.AddDate(0, 0, 1+r.IntN(36))
				break
			}
		}
	}
	if r.IntN(4) == 0 {
		o := &t.rows[r.IntN(len(t.rows))]
		o.freightCents = max(0, o.freightCents+r.IntN(2001)-1000)
	}
}

func ordersDataSet(rows []order) []byte {
	var b strings.Builder
	b.Grow(len(rows) * 560)
	b.WriteString(dotnetHead)
	b.WriteString(`<getordersResponse xmlns="http://tempuri.org/"><getordersResult>`)
	b.WriteString(`<xs:schema id="NewDataSet" xmlns="" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:msdata="urn:schemas-microsoft-com:xml-msdata">` +
		`<xs:element name="NewDataSet" msdata:IsDataSet="true" msdata:UseCurrentLocale="true"><xs:complexType>` +
		`<xs:choice minOccurs="0" maxOccurs="unbounded"><xs:element name="Orders"><xs:complexType><xs:sequence>`)
	for _, c := range ordersColumns {
		fmt.Fprintf(&b, `<xs:element name="%s" type="%s" minOccurs="0" />`, c.name, c.typ)
	}
	b.WriteString(`</xs:sequence></xs:complexType></xs:element></xs:choice></xs:complexType></xs:element></xs:schema>`)
	b.WriteString(`<diffgr:diffgram xmlns:msdata="urn:schemas-microsoft-com:xml-msdata" xmlns:diffgr="urn:schemas-microsoft-com:xml-diffgram-v1">` +
		`<NewDataSet xmlns="">`)
	const dt = "2006-01-02T15:04:05-07:00"
	for i, o := range rows {
		c := o.cust
		fmt.Fprintf(&b, `<Orders diffgr:id="Orders%d" msdata:rowOrder="%d">`, i+1, i)
		fmt.Fprintf(&b, "<OrderID>%d</OrderID><CustomerID>%s</CustomerID><EmployeeID>%d</EmployeeID>", o.id, c.id, o.employee)
		fmt.Fprintf(&b, "<OrderDate>%s</OrderDate><RequiredDate>%s</RequiredDate>", o.ordered.Format(dt), o.required.Format(dt))
		if !o.shipped.IsZero() {
			fmt.Fprintf(&b, "<ShippedDate>%s</ShippedDate>", o.shipped.Format(dt))
		}
		fmt.Fprintf(&b, "<ShipVia>%d</ShipVia><Freight>%d.%02d00</Freight>", o.shipVia, o.freightCents/100, o.freightCents%100)
		fmt.Fprintf(&b, "<ShipName>%s</ShipName><ShipAddress>%s</ShipAddress><ShipCity>%s</ShipCity>", esc(c.name), esc(c.addr), esc(c.city))
		if c.region != "" {
			fmt.Fprintf(&b, "<ShipRegion>%s</ShipRegion>", esc(c.region))
		}
		fmt.Fprintf(&b, "<ShipPostalCode>%s</ShipPostalCode><ShipCountry>%s</ShipCountry></Orders>", c.postal, c.country)
	}
	b.WriteString(`</NewDataSet></diffgr:diffgram></getordersResult></getordersResponse>`)
	b.WriteString(dotnetTail)
	return []byte(b.String())
}
