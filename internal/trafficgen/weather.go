package trafficgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Lai, Phan and Tari (seed 004): a weather service on Axis 1.2RC3,
// RPC/encoded, answering with a multiRef. The simple request carries a
// location and gets a float temperature; the detailed one gets a textual
// weather report large enough to span several TCP segments.

type city struct {
	name     string
	baseTemp float64
	tz       string
}

var cities = []city{
	{"Melbourne", 19, "AEDT"}, {"Sydney", 23, "AEDT"}, {"Brisbane", 26, "AEST"},
	{"Adelaide", 22, "ACDT"}, {"Perth", 24, "AWST"}, {"Hobart", 15, "AEDT"},
	{"Darwin", 30, "ACST"}, {"Canberra", 18, "AEDT"}, {"Alice Springs", 29, "ACST"},
}

// weatherState random-walks each city's conditions as time advances.
type weatherState struct {
	r     *rand.Rand
	now   time.Time
	temps []float64
	hum   []int
	press []float64
}

func newWeather(r *rand.Rand) *weatherState {
	w := &weatherState{r: r, now: time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(86400)) * time.Second)}
	for _, c := range cities {
		w.temps = append(w.temps, c.baseTemp+r.NormFloat64()*2)
		w.hum = append(w.hum, 40+r.IntN(40))
		w.press = append(w.press, 1005+r.Float64()*20)
	}
	return w
}

// step advances the clock by a few seconds and returns the next city.
func (w *weatherState) step() int {
	w.now = w.now.Add(time.Duration(1+w.r.IntN(15)) * time.Second)
	c := w.r.IntN(len(cities))
	w.temps[c] += w.r.NormFloat64() * 0.3
	w.hum[c] = min(100, max(5, w.hum[c]+w.r.IntN(5)-2))
	w.press[c] += w.r.NormFloat64() * 0.4
	return c
}

// Axis 1.2 does not pretty-print (axis.disablePrettyXML defaults to true).
const (
	axis12Head = `<?xml version="1.0" encoding="UTF-8"?>` +
		`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"` +
		` xmlns:xsd="http://www.w3.org/2001/XMLSchema"` +
		` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>`
	axis12Tail = `</soapenv:Body></soapenv:Envelope>`
	weatherNS  = "urn:Weather"
)

func axis12Request(op, city string) []byte {
	return []byte(axis12Head +
		`<ns1:` + op + ` soapenv:encodingStyle="` + soapEnc + `" xmlns:ns1="` + weatherNS + `">` +
		`<symbol xsi:type="xsd:string">` + esc(city) + `</symbol>` +
		`</ns1:` + op + `>` + axis12Tail)
}

func axis12Response(op, typ, value string) []byte {
	return []byte(axis12Head +
		`<ns1:` + op + `Response soapenv:encodingStyle="` + soapEnc + `" xmlns:ns1="` + weatherNS + `">` +
		`<` + op + `Return href="#id0"/>` +
		`</ns1:` + op + `Response>` +
		`<multiRef id="id0" soapenc:root="0" soapenv:encodingStyle="` + soapEnc + `" xsi:type="xsd:` + typ +
		`" xmlns:soapenc="` + soapEnc + `">` + esc(value) + `</multiRef>` + axis12Tail)
}

func weatherSimple(n int, r *rand.Rand) []Message {
	w := newWeather(r)
	return pairs(n, func(int) (Message, Message) {
		c := w.step()
		t := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.1f", w.temps[c]), "0"), ".")
		if !strings.Contains(t, ".") {
			t += ".0"
		}
		return Message{Name: "getTemperature", Body: axis12Request("getTemperature", cities[c].name)},
			Message{Name: "getTemperatureResponse", Body: axis12Response("getTemperature", "float", t)}
	})
}

var (
	skies   = []string{"Fine and sunny", "Mostly sunny", "Partly cloudy", "Cloudy", "Showers", "Possible thunderstorm", "Morning fog then sunny", "Windy with showers"}
	winds   = []string{"N", "NE", "E", "SE", "S", "SW", "W", "NW"}
	weekday = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
)

func weatherDetailed(n int, r *rand.Rand) []Message {
	w := newWeather(r)
	return pairs(n, func(int) (Message, Message) {
		c := w.step()
		report := w.report(c)
		return Message{Name: "getWeatherReport", Body: axis12Request("getWeatherReport", cities[c].name)},
			Message{Name: "getWeatherReportResponse", Body: axis12Response("getWeatherReport", "string", report)}
	})
}

// report writes a Bureau-of-Meteorology-like report, 1.5 to 2.5 KB.
func (w *weatherState) report(c int) string {
	r := w.r
	ci := cities[c]
	t := w.temps[c]
	var b strings.Builder
	fmt.Fprintf(&b, "Weather report for %s issued at %s %s.\n", ci.name, w.now.Format("15:04 Mon 2 Jan 2006"), ci.tz)
	fmt.Fprintf(&b, "Current conditions: %s. Temperature %.1f C, feels like %.1f C. Relative humidity %d%%. "+
		"Dew point %.1f C. Pressure %.1f hPa, %s. Wind %s at %d km/h gusting to %d km/h. Visibility %d km. Rainfall since 9am %.1f mm.\n",
		pick(r, skies), t, t-float64(r.IntN(40))/10, w.hum[c], t-float64(100-w.hum[c])/5, w.press[c],
		pick(r, []string{"rising", "falling", "steady"}), pick(r, winds), 5+r.IntN(30), 35+r.IntN(30), 10+r.IntN(40), float64(r.IntN(60))/10)
	fmt.Fprintf(&b, "UV index %d (%s). Sunrise %02d:%02d, sunset %02d:%02d.\n", 1+r.IntN(13),
		pick(r, []string{"low", "moderate", "high", "very high", "extreme"}), 5+r.IntN(2), r.IntN(60), 19+r.IntN(2), r.IntN(60))
	b.WriteString("Forecast:\n")
	day := w.now
	for d := range 7 {
		day = day.Add(24 * time.Hour)
		lo := t - 6 + r.NormFloat64()*2
		hi := t + 3 + r.NormFloat64()*2
		fmt.Fprintf(&b, "%s %s: %s. Min %d, max %d. Chance of any rain %d%%, %d to %d mm. Winds %s %d to %d km/h",
			weekday[day.Weekday()], day.Format("2 Jan"), pick(r, skies), int(math.Round(lo)), int(math.Round(hi)),
			r.IntN(10)*10, r.IntN(3), 2+r.IntN(10), pick(r, winds), 10+r.IntN(10), 20+r.IntN(15))
		if d < 2 {
			b.WriteString(", becoming light in the evening. Fire danger " + pick(r, []string{"low-moderate", "high", "very high", "severe"}))
		}
		b.WriteString(".\n")
	}
	b.WriteString("Marine: seas below 1 metre inside the bay, 1 to 2 metres outside with a southwest swell. " +
		"Warnings: none current for this district at the time of issue.")
	return b.String()
}
