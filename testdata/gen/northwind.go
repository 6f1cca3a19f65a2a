package gen

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

func northwind(n int, r *rand.Rand) []Message {
	return pairs(n, func(int) (Message, Message) {
		rows := 300 + r.IntN(531) // 300..830
		req := dotnetHead + `<getorders xmlns="http://tempuri.org/" />` + dotnetTail
		return Message{Name: "getorders", Body: []byte(req)},
			Message{Name: "getordersResponse", Body: ordersDataSet(r, rows)}
	})
}

func ordersDataSet(r *rand.Rand, rows int) []byte {
	var b strings.Builder
	b.Grow(rows * 560)
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
	// .NET writes DataSet dates in the server's local time with its offset; this one
	// runs in India (+05:30).
	const dt = "2006-01-02T15:04:05-07:00"
	date := time.Date(1996, 7, 4, 0, 0, 0, 0, time.FixedZone("IST", 5*3600+30*60))
	for i := range rows {
		c := pick(r, customers)
		fmt.Fprintf(&b, `<Orders diffgr:id="Orders%d" msdata:rowOrder="%d">`, i+1, i)
		fmt.Fprintf(&b, "<OrderID>%d</OrderID><CustomerID>%s</CustomerID><EmployeeID>%d</EmployeeID>", 10248+i, c.id, 1+r.IntN(9))
		fmt.Fprintf(&b, "<OrderDate>%s</OrderDate><RequiredDate>%s</RequiredDate>", date.Format(dt), date.AddDate(0, 0, pick(r, []int{14, 28, 28, 28, 42})).Format(dt))
		if i < rows-20 || r.IntN(3) == 0 { // the most recent orders may not have shipped yet
			fmt.Fprintf(&b, "<ShippedDate>%s</ShippedDate>", date.AddDate(0, 0, 1+r.IntN(36)).Format(dt))
		}
		fmt.Fprintf(&b, "<ShipVia>%d</ShipVia><Freight>%d.%02d00</Freight>", 1+r.IntN(3), r.IntN(r.IntN(1000)+1), r.IntN(100))
		fmt.Fprintf(&b, "<ShipName>%s</ShipName><ShipAddress>%s</ShipAddress><ShipCity>%s</ShipCity>", esc(c.name), esc(c.addr), esc(c.city))
		if c.region != "" {
			fmt.Fprintf(&b, "<ShipRegion>%s</ShipRegion>", esc(c.region))
		}
		fmt.Fprintf(&b, "<ShipPostalCode>%s</ShipPostalCode><ShipCountry>%s</ShipCountry></Orders>", c.postal, c.country)
		date = date.AddDate(0, 0, r.IntN(2)+r.IntN(2))
	}
	b.WriteString(`</NewDataSet></diffgr:diffgram></getordersResult></getordersResponse>`)
	b.WriteString(dotnetTail)
	return []byte(b.String())
}
