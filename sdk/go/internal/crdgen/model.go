package crdgen

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// typeKind classifies a Go type of the generated package.
type typeKind int

const (
	kindScalar   typeKind = iota // a predeclared type: string, bool, int32, int64, float32, float64, byte
	kindEnum                     // a generated named string type with constants
	kindStruct                   // a generated struct
	kindExternal                 // a type from another package, such as metav1.Time
	kindPointer                  // *elem
	kindSlice                    // []elem
	kindMap                      // map[string]elem
)

// goType is one Go type expression of the generated code.
type goType struct {
	kind typeKind
	// name is the predeclared name (scalar) or the name inside its package (external).
	name string
	// def is the generated type (enum, struct).
	def *typeDef
	// pkg is the package of an external type.
	pkg *goPackage
	// deep reports, for an external type, that copying it by assignment would share memory, so
	// a deep copy must call its DeepCopyInto method.
	deep bool
	// elem is the element of a pointer, slice or map.
	elem *goType
}

// goPackage is an imported package and the name the generated code gives it.
type goPackage struct {
	alias string
	path  string
}

var (
	pkgMetav1          = &goPackage{alias: "metav1", path: "k8s.io/apimachinery/pkg/apis/meta/v1"}
	pkgResource        = &goPackage{alias: "resource", path: "k8s.io/apimachinery/pkg/api/resource"}
	pkgIntstr          = &goPackage{alias: "intstr", path: "k8s.io/apimachinery/pkg/util/intstr"}
	pkgRuntime         = &goPackage{alias: "runtime", path: "k8s.io/apimachinery/pkg/runtime"}
	pkgSchema          = &goPackage{alias: "schema", path: "k8s.io/apimachinery/pkg/runtime/schema"}
	pkgApiextensionsV1 = &goPackage{alias: "apiextensionsv1", path: "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"}
)

var (
	typeTime        = &goType{kind: kindExternal, name: "Time", pkg: pkgMetav1, deep: true}
	typeCondition   = &goType{kind: kindExternal, name: "Condition", pkg: pkgMetav1, deep: true}
	typeQuantity    = &goType{kind: kindExternal, name: "Quantity", pkg: pkgResource, deep: true}
	typeIntOrString = &goType{kind: kindExternal, name: "IntOrString", pkg: pkgIntstr, deep: false}
	typeJSON        = &goType{kind: kindExternal, name: "JSON", pkg: pkgApiextensionsV1, deep: true}
	typeRawExt      = &goType{kind: kindExternal, name: "RawExtension", pkg: pkgRuntime, deep: true}
)

func scalar(name string) *goType { return &goType{kind: kindScalar, name: name} }
func pointer(t *goType) *goType  { return &goType{kind: kindPointer, elem: t} }
func sliceOf(t *goType) *goType  { return &goType{kind: kindSlice, elem: t} }
func mapOf(t *goType) *goType    { return &goType{kind: kindMap, elem: t} }

// isValue reports whether t is neither a pointer, nor a slice, nor a map.
func (t *goType) isValue() bool {
	return t.kind == kindScalar || t.kind == kindEnum || t.kind == kindStruct || t.kind == kindExternal
}

// needsDeepCopy reports whether copying a value of t by assignment would share memory.
func (t *goType) needsDeepCopy() bool {
	switch t.kind {
	case kindScalar, kindEnum:
		return false
	case kindStruct:
		return t.def.deep
	case kindExternal:
		return t.deep
	default:
		return true
	}
}

// ident identifies t among the types of one generation run without depending on the names
// generated types get later.
func (t *goType) ident() string {
	switch t.kind {
	case kindExternal:
		return t.pkg.alias + "." + t.name
	case kindStruct, kindEnum:
		return fmt.Sprintf("#%d", t.def.id)
	case kindPointer:
		return "*" + t.elem.ident()
	case kindSlice:
		return "[]" + t.elem.ident()
	case kindMap:
		return "map[string]" + t.elem.ident()
	default:
		return t.name
	}
}

// fieldDef is one field of a generated struct.
type fieldDef struct {
	goName    string
	jsonName  string
	typ       *goType
	omitEmpty bool
	doc       string
}

// typeDef is a generated named type: a struct for one distinct object schema, or a string type
// for one distinct enum. Identical schemas share one typeDef; it is named after the best of its
// occurrences once the walk is over.
type typeDef struct {
	id     int // order of first sight
	enum   bool
	name   string
	best   occurrence
	shared int // occurrences besides the best one

	// struct
	fields    []fieldDef
	preserves bool // the schema sets x-kubernetes-preserve-unknown-fields
	deep      bool // some field needs a deep copy

	// enum
	values []string
	consts []string
}

// occurrence is one place in the schemas where a typeDef is used.
type occurrence struct {
	owner  int // index of the kind
	seq    int // position in the pre-order walk of all schemas
	depth  int // property nesting: 1 for .spec, 2 for .spec.storage
	path   string
	doc    string
	parent *parentRef
	suffix string // the field's Go name, singular for array elements
}

// before orders occurrences: shallower first, then earlier in the walk. The best occurrence
// of a type names it, so a kind's .spec is named after that kind even when another kind
// embeds the same schema deeper and earlier in the walk.
func (o occurrence) before(other occurrence) bool {
	if o.depth != other.depth {
		return o.depth < other.depth
	}
	return o.seq < other.seq
}

// parentRef is the type that holds a field: a kind, or a struct whose typeDef is known once all
// of its fields are.
type parentRef struct {
	kind string
	def  *typeDef
}

func (p *parentRef) name() string {
	if p.def != nil {
		return p.def.name
	}
	return p.kind
}

// kindDef is one CustomResourceDefinition's kind.
type kindDef struct {
	kind              string
	listKind          string
	plural            string
	singular          string
	shortNames        []string
	categories        []string
	namespaced        bool
	statusSubresource bool
	doc               string
	fields            []fieldDef
}

// model is everything the three output files are rendered from.
type model struct {
	group   string
	version string
	kinds   []*kindDef
	// types are all generated structs and enums, ordered by owner kind, then walk position.
	types []*typeDef
}

// builder turns CRD schemas into a model. Schemas are walked kind by kind (sorted by kind),
// properties in name order, so every name and numeric suffix is the same on every run.
type builder struct {
	opts  Options
	bySig map[string]*typeDef
	defs  []*typeDef
	seq   int
	owner int
}

// reservedNames are identifiers the register file declares.
var reservedNames = []string{
	"GroupVersion", "SchemeGroupVersion", "SchemeBuilder", "AddToScheme", "Resource",
	"KindInfo", "Kinds", "addKnownTypes",
}

// methodNames are the methods every generated struct has; no field may take their names.
var methodNames = []string{"DeepCopy", "DeepCopyInto", "DeepCopyObject"}

func buildModel(crds []*apiextensionsv1.CustomResourceDefinition, opts Options) (*model, error) {
	b := &builder{opts: opts, bySig: map[string]*typeDef{}}
	m := &model{version: opts.Version}
	names := newNameSet()
	for _, name := range reservedNames {
		names.reserve(name)
	}
	sorted := append([]*apiextensionsv1.CustomResourceDefinition(nil), crds...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Spec.Names.Kind < sorted[j].Spec.Names.Kind })

	// Kind and list names are taken first so that no nested type can claim them.
	seenKinds := map[string]string{}
	for _, crd := range sorted {
		kindNames := crd.Spec.Names
		if !isIdentifier(kindNames.Kind) || !isIdentifier(listKindOf(kindNames)) {
			return nil, fmt.Errorf("CRD %s: spec.names.kind %q (list kind %q) is not a Go identifier",
				crd.Name, kindNames.Kind, listKindOf(kindNames))
		}
		if other, dup := seenKinds[kindNames.Kind]; dup {
			return nil, fmt.Errorf("CRD %s: spec.names.kind %q is also the kind of CRD %s", crd.Name, kindNames.Kind, other)
		}
		seenKinds[kindNames.Kind] = crd.Name
		if m.group == "" {
			m.group = crd.Spec.Group
		} else if crd.Spec.Group != m.group {
			return nil, fmt.Errorf("CRD %s: spec.group is %q but other CRDs have %q; one package holds one group",
				crd.Name, crd.Spec.Group, m.group)
		}
		names.reserve(kindNames.Kind)
		names.reserve(listKindOf(kindNames))
	}
	for index, crd := range sorted {
		b.owner = index
		kind, err := b.kind(crd)
		if err != nil {
			return nil, fmt.Errorf("CRD %s: %w", crd.Name, err)
		}
		m.kinds = append(m.kinds, kind)
	}

	// Name the types shallowest first: the parent of a type's best occurrence is shallower
	// than it, so its name is known by then.
	byDepth := append([]*typeDef(nil), b.defs...)
	sort.SliceStable(byDepth, func(i, j int) bool { return byDepth[i].best.before(byDepth[j].best) })
	for _, def := range byDepth {
		def.name = names.claim(def.best.parent.name() + def.best.suffix)
		for _, value := range def.values {
			suffix := goName(value)
			if suffix == "" {
				suffix = "Empty"
			}
			def.consts = append(def.consts, names.claim(def.name+suffix))
		}
	}
	m.types = append([]*typeDef(nil), b.defs...)
	sort.SliceStable(m.types, func(i, j int) bool {
		a, c := m.types[i].best, m.types[j].best
		if a.owner != c.owner {
			return a.owner < c.owner
		}
		return a.seq < c.seq
	})
	return m, nil
}

func listKindOf(names apiextensionsv1.CustomResourceDefinitionNames) string {
	if names.ListKind != "" {
		return names.ListKind
	}
	return names.Kind + "List"
}

func isIdentifier(s string) bool {
	for i, r := range s {
		if !unicode.IsLetter(r) && r != '_' && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return s != ""
}

// kind builds the kindDef of one CRD from its version opts.Version.
func (b *builder) kind(crd *apiextensionsv1.CustomResourceDefinition) (*kindDef, error) {
	var version *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == b.opts.Version {
			version = &crd.Spec.Versions[i]
		}
	}
	if version == nil {
		return nil, fmt.Errorf("spec.versions has no version %q", b.opts.Version)
	}
	if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("spec.versions[%s].schema.openAPIV3Schema is missing", b.opts.Version)
	}
	root := version.Schema.OpenAPIV3Schema
	names := crd.Spec.Names
	k := &kindDef{
		kind:              names.Kind,
		listKind:          listKindOf(names),
		plural:            names.Plural,
		singular:          names.Singular,
		shortNames:        names.ShortNames,
		categories:        names.Categories,
		namespaced:        crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		statusSubresource: version.Subresources != nil && version.Subresources.Status != nil,
	}
	scope := "cluster-scoped"
	if k.namespaced {
		scope = "namespaced"
	}
	summary := fmt.Sprintf("%s is a kind of the %s/%s API (%s, resource %s", k.kind, crd.Spec.Group, b.opts.Version, scope, k.plural)
	if len(k.shortNames) > 0 {
		summary += ", short names " + strings.Join(k.shortNames, ", ")
	}
	summary += ")."
	// kube-rs gives the root a boilerplate description; the spec's says what the kind is.
	description := root.Description
	if strings.HasPrefix(description, "Auto-generated derived type for") {
		description = ""
		if spec, ok := root.Properties["spec"]; ok {
			description = spec.Description
		}
	}
	k.doc = joinParagraphs(summary, description)

	fieldNames := newNameSet()
	for _, reserved := range append([]string{"TypeMeta", "ObjectMeta", "APIVersion", "Kind"}, methodNames...) {
		fieldNames.reserve(reserved)
	}
	parent := &parentRef{kind: k.kind}
	required := stringSet(root.Required)
	for _, prop := range sortedKeys(root.Properties) {
		if prop == "apiVersion" || prop == "kind" || prop == "metadata" {
			continue
		}
		schema := root.Properties[prop]
		field, err := b.field(prop, &schema, required[prop], parent, "", 1, fieldNames)
		if err != nil {
			return nil, err
		}
		k.fields = append(k.fields, field)
	}
	return k, nil
}

// field builds the struct field for property prop, at the given depth, of the object schema
// at parentPath whose Go type is parent.
func (b *builder) field(prop string, schema *apiextensionsv1.JSONSchemaProps, required bool, parent *parentRef, parentPath string, depth int, fieldNames *nameSet) (fieldDef, error) {
	path := parentPath + "." + prop
	base := goName(prop)
	if base == "" {
		return fieldDef{}, fmt.Errorf("%s: property name %q has no letter or digit to build a Go name from", path, prop)
	}
	if unicode.IsDigit([]rune(base)[0]) {
		base = "X" + base
	}
	name := fieldNames.claim(base)
	suffix := name
	if schema.Type == "array" {
		suffix = singular(name)
	}
	typ, err := b.typeFor(schema, parent, suffix, path, depth)
	if err != nil {
		return fieldDef{}, err
	}
	// Optional values are pointers so that "unset" and "zero" differ; slices and maps already
	// have nil. A required but nullable value is a pointer too, so null survives a round trip.
	if typ.isValue() && (!required || schema.Nullable) {
		typ = pointer(typ)
	}
	return fieldDef{
		goName:    name,
		jsonName:  prop,
		typ:       typ,
		omitEmpty: !required && !keepsEmptyDefault(schema, typ),
		doc:       fieldDoc(schema, required),
	}, nil
}

// keepsEmptyDefault reports whether an optional slice or map field must not have omitempty:
// its default is empty ([] or {}) and it is not nullable, so the API server returns [] or {}
// for it. Without omitempty an empty value encodes as itself and the object round-trips
// exactly; a nil one encodes as null, which the API server prunes and then defaults (for
// fields that are not nullable) to the same empty value.
func keepsEmptyDefault(schema *apiextensionsv1.JSONSchemaProps, typ *goType) bool {
	if schema.Nullable || schema.Default == nil || (typ.kind != kindSlice && typ.kind != kindMap) || schema.Type == "string" {
		return false
	}
	switch strings.Join(strings.Fields(string(schema.Default.Raw)), "") {
	case "[]", "{}":
		return true
	default:
		return false
	}
}

// singular makes the last word of an exported name singular for the element type of an
// array ("Volumes" -> "Volume", "Entries" -> "Entry", "GPUs" -> "GPU"); words it cannot tell
// are plural stay as they are.
func singular(name string) string {
	lower := strings.ToLower(name)
	runes := []rune(name)
	switch {
	case len(runes) > 2 && runes[len(runes)-1] == 's' && unicode.IsUpper(runes[len(runes)-2]):
		return string(runes[:len(runes)-1]) // an initialism's plural: "GPUs", "IDs"
	case strings.HasSuffix(lower, "ies") && len(name) > 3:
		return name[:len(name)-3] + "y"
	case strings.HasSuffix(lower, "sses"), strings.HasSuffix(lower, "xes"),
		strings.HasSuffix(lower, "ches"), strings.HasSuffix(lower, "shes"):
		return name[:len(name)-2]
	case strings.HasSuffix(lower, "ss"), strings.HasSuffix(lower, "us"), strings.HasSuffix(lower, "is"):
		return name
	case strings.HasSuffix(lower, "s") && len(name) > 1:
		return name[:len(name)-1]
	default:
		return name
	}
}

// fieldDoc is a field's comment: the schema description, the server-side default, and the
// markers Kubernetes tools read.
func fieldDoc(schema *apiextensionsv1.JSONSchemaProps, required bool) string {
	var notes []string
	if schema.Default != nil && len(schema.Default.Raw) > 0 {
		notes = append(notes, fmt.Sprintf("The API server defaults it to %s.", strings.TrimSpace(string(schema.Default.Raw))))
	}
	var markers []string
	if !required {
		markers = append(markers, "+optional")
	}
	if schema.XListType != nil {
		markers = append(markers, "+listType="+*schema.XListType)
	}
	for _, key := range schema.XListMapKeys {
		markers = append(markers, "+listMapKey="+key)
	}
	if schema.XMapType != nil {
		markers = append(markers, "+mapType="+*schema.XMapType)
	}
	return joinParagraphs(schema.Description, strings.Join(notes, " "), strings.Join(markers, "\n"))
}

// typeFor returns the Go type of the schema at path, the value of field suffix of parent (an
// array's element and a map's value count as the field).
func (b *builder) typeFor(schema *apiextensionsv1.JSONSchemaProps, parent *parentRef, suffix, path string, depth int) (*goType, error) {
	if err := checkCombinators(schema, path); err != nil {
		return nil, err
	}
	preserve := schema.XPreserveUnknownFields != nil && *schema.XPreserveUnknownFields
	switch {
	case schema.XIntOrString:
		return b.intOrString(schema), nil
	case schema.XEmbeddedResource:
		return typeRawExt, nil
	}
	switch schema.Type {
	case "object":
		switch {
		case len(schema.Properties) > 0 && isCondition(schema):
			return typeCondition, nil
		case len(schema.Properties) > 0:
			return b.structType(schema, parent, suffix, path, depth)
		case schema.AdditionalProperties != nil && schema.AdditionalProperties.Schema != nil:
			elem, err := b.typeFor(schema.AdditionalProperties.Schema, parent, suffix, path+"{}", depth)
			if err != nil {
				return nil, err
			}
			return mapOf(elem), nil
		case schema.AdditionalProperties != nil && schema.AdditionalProperties.Allows:
			return mapOf(typeJSON), nil
		case preserve:
			return typeJSON, nil
		default:
			// An object without properties keeps no field through pruning: an empty struct.
			return b.structType(schema, parent, suffix, path, depth)
		}
	case "array":
		if schema.Items == nil || schema.Items.Schema == nil {
			return nil, fmt.Errorf("%s: an array needs one items schema (tuple items are not supported)", path)
		}
		elem, err := b.typeFor(schema.Items.Schema, parent, suffix, path+"[]", depth)
		if err != nil {
			return nil, err
		}
		return sliceOf(elem), nil
	case "string":
		if len(schema.Enum) > 0 {
			return b.enumType(schema, parent, suffix, path, depth)
		}
		switch schema.Format {
		case "date-time":
			return typeTime, nil
		case "byte":
			return sliceOf(scalar("byte")), nil
		default:
			return scalar("string"), nil
		}
	case "integer":
		if schema.Format == "int32" {
			return scalar("int32"), nil
		}
		return scalar("int64"), nil
	case "number":
		if schema.Format == "float" {
			return scalar("float32"), nil
		}
		return scalar("float64"), nil
	case "boolean":
		return scalar("bool"), nil
	case "":
		if preserve {
			return typeJSON, nil
		}
		return nil, fmt.Errorf("%s: the schema has no type and does not set x-kubernetes-preserve-unknown-fields", path)
	default:
		return nil, fmt.Errorf("%s: type %q is not an OpenAPI v3 type", path, schema.Type)
	}
}

// checkCombinators rejects anyOf/oneOf/allOf/not that would change the shape of the data.
// Structural schemas use them only for validation (for example "one of these fields is
// required"), which the Go types need not express; x-kubernetes-int-or-string's
// anyOf [integer, string] is the one shape-carrying use allowed.
func checkCombinators(schema *apiextensionsv1.JSONSchemaProps, path string) error {
	groups := map[string][]apiextensionsv1.JSONSchemaProps{"anyOf": schema.AnyOf, "oneOf": schema.OneOf, "allOf": schema.AllOf}
	if schema.Not != nil {
		groups["not"] = []apiextensionsv1.JSONSchemaProps{*schema.Not}
	}
	for _, keyword := range []string{"allOf", "anyOf", "not", "oneOf"} {
		for _, sub := range groups[keyword] {
			shaped := sub.Type != "" || len(sub.Properties) > 0 || sub.Items != nil || sub.AdditionalProperties != nil
			if shaped && !(schema.XIntOrString && keyword == "anyOf") {
				return fmt.Errorf("%s: %s with types or properties is not supported; a structural schema declares its shape outside %s",
					path, keyword, keyword)
			}
		}
	}
	return nil
}

// intOrString maps an x-kubernetes-int-or-string schema. A pattern decides when there is one
// (a quantity pattern means resource.Quantity, any other intstr.IntOrString); without a
// pattern Options.BareIntOrString decides.
func (b *builder) intOrString(schema *apiextensionsv1.JSONSchemaProps) *goType {
	if schema.Pattern != "" {
		if isQuantityPattern(schema.Pattern) {
			return typeQuantity
		}
		return typeIntOrString
	}
	if b.opts.BareIntOrString == BareIntOrStringAsIntOrString {
		return typeIntOrString
	}
	return typeQuantity
}

// isQuantityPattern reports whether pattern is the Kubernetes quantity pattern, or one like it
// that names the binary suffixes.
func isQuantityPattern(pattern string) bool {
	return strings.Contains(pattern, "[KMGTPE]i") || strings.Contains(pattern, "Ki|Mi")
}

// isCondition reports whether an object schema is exactly metav1.Condition: type, status,
// reason, message (strings), lastTransitionTime (date-time) and observedGeneration (integer),
// with metav1.Condition's required fields required.
func isCondition(schema *apiextensionsv1.JSONSchemaProps) bool {
	want := map[string][2]string{
		"type":               {"string", ""},
		"status":             {"string", ""},
		"reason":             {"string", ""},
		"message":            {"string", ""},
		"lastTransitionTime": {"string", "date-time"},
		"observedGeneration": {"integer", ""},
	}
	if len(schema.Properties) != len(want) {
		return false
	}
	for name, prop := range schema.Properties {
		shape, ok := want[name]
		if !ok || prop.Type != shape[0] || (shape[1] != "" && prop.Format != shape[1]) || len(prop.Enum) > 0 {
			return false
		}
	}
	required := stringSet(schema.Required)
	for _, name := range []string{"type", "status", "reason", "message", "lastTransitionTime"} {
		if !required[name] {
			return false
		}
	}
	return true
}

// structType returns the struct for an object schema, sharing the struct of an identical
// schema (same fields, field types and field comments) met elsewhere.
func (b *builder) structType(schema *apiextensionsv1.JSONSchemaProps, parent *parentRef, suffix, path string, depth int) (*goType, error) {
	b.seq++
	at := occurrence{owner: b.owner, seq: b.seq, depth: depth, path: path, doc: schema.Description, parent: parent, suffix: suffix}
	self := &parentRef{}
	fieldNames := newNameSet()
	for _, method := range methodNames {
		fieldNames.reserve(method)
	}
	required := stringSet(schema.Required)
	var fields []fieldDef
	deep := false
	for _, prop := range sortedKeys(schema.Properties) {
		child := schema.Properties[prop]
		field, err := b.field(prop, &child, required[prop], self, path, depth+1, fieldNames)
		if err != nil {
			return nil, err
		}
		fields = append(fields, field)
		deep = deep || field.typ.needsDeepCopy()
	}
	preserves := schema.XPreserveUnknownFields != nil && *schema.XPreserveUnknownFields
	var sig strings.Builder
	fmt.Fprintf(&sig, "struct preserve=%t\n", preserves)
	for _, f := range fields {
		fmt.Fprintf(&sig, "%s\x00%s\x00%s\x00%t\x00%s\n", f.goName, f.jsonName, f.typ.ident(), f.omitEmpty, f.doc)
	}
	self.def = b.intern(sig.String(), at, func() *typeDef {
		return &typeDef{fields: fields, preserves: preserves, deep: deep}
	})
	return &goType{kind: kindStruct, def: self.def}, nil
}

// enumType returns the string type for a string enum, sharing the type of an enum with the
// same values in the same order.
func (b *builder) enumType(schema *apiextensionsv1.JSONSchemaProps, parent *parentRef, suffix, path string, depth int) (*goType, error) {
	b.seq++
	at := occurrence{owner: b.owner, seq: b.seq, depth: depth, path: path, doc: schema.Description, parent: parent, suffix: suffix}
	var values []string
	for i, raw := range schema.Enum {
		text := strings.TrimSpace(string(raw.Raw))
		if text == "" || text == "null" {
			continue // a nullable enum may list null (decoded as no bytes); the Go pointer carries it
		}
		var value string
		if err := json.Unmarshal(raw.Raw, &value); err != nil {
			return nil, fmt.Errorf("%s: enum[%d] is %s, want a string in a string schema", path, i, text)
		}
		values = append(values, value)
	}
	def := b.intern("enum\n"+strings.Join(values, "\x00"), at, func() *typeDef {
		return &typeDef{enum: true, values: values}
	})
	return &goType{kind: kindEnum, def: def}, nil
}

// intern returns the typeDef with signature sig, creating it with create if it is new, and
// records occurrence at.
func (b *builder) intern(sig string, at occurrence, create func() *typeDef) *typeDef {
	if def, ok := b.bySig[sig]; ok {
		def.shared++
		if at.before(def.best) {
			def.best = at
		}
		return def
	}
	def := create()
	def.id = len(b.defs)
	def.best = at
	b.bySig[sig] = def
	b.defs = append(b.defs, def)
	return def
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

func stringSet(items []string) map[string]bool {
	set := make(map[string]bool, len(items))
	for _, item := range items {
		set[item] = true
	}
	return set
}

// joinParagraphs joins the non-empty parts with a blank line between them.
func joinParagraphs(parts ...string) string {
	var kept []string
	for _, part := range parts {
		if part = strings.TrimSpace(part); part != "" {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, "\n\n")
}
