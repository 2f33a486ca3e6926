// A static scan of Tack's sources for the error codes they throw, for the catalogue tests.
import { readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";

/** One place a code is written: the code, where its text is (`file:line`, repo-relative), and how it is thrown. */
export interface CodeSite {
  readonly code: string;
  readonly file: string;
  readonly line: number;
  /** The construct that throws it: `new TackError`, `new GatewayError`, `TackError.from`, `super`, `{ code, message }`, ... */
  readonly via: string;
  /** What the throwing site sets `retryable` to: a literal, `"dynamic"` (an expression), or undefined when not a TackError. */
  readonly retryable?: boolean | "dynamic";
  /** For `new GatewayError(<status>, …)`: the literal HTTP status it answers with. */
  readonly status?: number;
}

/** A code argument the scan cannot reduce to literal codes (it must be fixed, not allowed). */
export interface Unresolved {
  readonly file: string;
  readonly line: number;
  readonly text: string;
  readonly reason: string;
}

/** What the scan found: the codes thrown, codes only compared against, and code arguments it could not follow. */
export interface ScanResult {
  readonly thrown: readonly CodeSite[];
  /** Codes a `.code === "…"` / `case "…":` compares against, which some code somewhere must throw. */
  readonly compared: readonly CodeSite[];
  readonly unresolved: readonly Unresolved[];
  readonly files: number;
}

/** The text of a code: `service.what` (lower case, digits and `_`, at least one dot) or `internal`. */
export const CODE_SHAPE = /^(?:[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+|internal)$/;

/** Every `.ts` file under `<root>/{services,packages}/<name>/src`, generated protobuf code excluded. */
export function sourceFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) {
        if (name !== "node_modules" && name !== "gen") walk(path);
      } else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(path);
    }
  };
  for (const top of ["services", "packages"]) {
    for (const pkg of readdirSync(join(root, top)).sort()) {
      const src = join(root, top, pkg, "src");
      if (statSync(join(root, top, pkg)).isDirectory() && exists(src)) walk(src);
    }
  }
  return out;
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

type Callable = ts.SignatureDeclaration;

/**
 * Scans `files` (absolute paths under `root`) for every error code they throw. A code argument is
 * followed through string literals, `a ? "x" : "y"`, `a ?? "x"`, consts with such initialisers,
 * template strings whose parts resolve, and parameters (every call of the function or constructor
 * across the files, and the parameter's default). Passing on an existing error's `.code` is
 * allowed (the code was checked where it was made); anything else is reported as unresolved.
 */
export function scanCodes(root: string, files: readonly string[]): ScanResult {
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
    allowImportingTsExtensions: true, noEmit: true, noLib: true, types: [],
  };
  // Only Tack's own sources are parsed: declarations from node_modules are read as empty files
  // (the scan follows Tack's code, never a library's), which keeps the scan to a few seconds.
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, language, onError, create) =>
    fileName.includes("/node_modules/") ? ts.createSourceFile(fileName, "", language) : getSourceFile(fileName, language, onError, create);
  const program = ts.createProgram({ rootNames: [...files], options, host });
  const checker = program.getTypeChecker();
  const fileSet = new Set(files);
  const sources = program.getSourceFiles().filter((f) => fileSet.has(f.fileName));

  const where = (node: ts.Node): { file: string; line: number } => {
    const sf = node.getSourceFile();
    return { file: relative(root, sf.fileName), line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1 };
  };

  // Every call and `new` in the files, by the declaration it calls (for following parameters).
  const callsOf = new Map<ts.Node, (ts.CallExpression | ts.NewExpression)[]>();
  // By symbol, not by signature: resolving signatures type-checks every call and triples the scan's time.
  const calledDeclaration = (call: ts.CallExpression | ts.NewExpression): ts.Node | undefined => {
    if (call.expression.kind === ts.SyntaxKind.SuperKeyword) {
      const cls = ts.findAncestor(call, ts.isClassLike);
      const extended = cls?.heritageClauses?.find((c) => c.token === ts.SyntaxKind.ExtendsKeyword)?.types[0];
      return extended ? constructorOf(classOf(extended.expression)) : undefined;
    }
    let symbol = checker.getSymbolAtLocation(call.expression);
    if (symbol && symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
    const declaration = symbol?.valueDeclaration ?? symbol?.declarations?.[0];
    if (!declaration) return undefined;
    if (ts.isClassLike(declaration)) return constructorOf(declaration);
    if (ts.isVariableDeclaration(declaration) && declaration.initializer) {
      const init = skipOuter(declaration.initializer);
      return ts.isArrowFunction(init) || ts.isFunctionExpression(init) ? init : undefined;
    }
    if (ts.isPropertyAssignment(declaration) || ts.isPropertyDeclaration(declaration)) {
      const init = declaration.initializer && skipOuter(declaration.initializer);
      return init && (ts.isArrowFunction(init) || ts.isFunctionExpression(init)) ? init : undefined;
    }
    return ts.isFunctionLike(declaration) ? declaration : undefined;
  };
  const constructorOf = (cls: ts.ClassLikeDeclaration | undefined): ts.Node | undefined =>
    cls?.members.find((m): m is ts.ConstructorDeclaration => ts.isConstructorDeclaration(m) && m.body !== undefined);

  const isTackErrorClass = (declaration: ts.ClassLikeDeclaration | undefined, seen = new Set<ts.Node>()): boolean => {
    if (!declaration || seen.has(declaration)) return false;
    seen.add(declaration);
    if (declaration.name?.text === "TackError" && declaration.getSourceFile().fileName.endsWith("packages/bus/src/errors.ts")) return true;
    for (const clause of declaration.heritageClauses ?? []) {
      if (clause.token !== ts.SyntaxKind.ExtendsKeyword) continue;
      for (const type of clause.types) {
        const base = classOf(type.expression);
        if (isTackErrorClass(base, seen)) return true;
      }
    }
    return false;
  };
  const classOf = (expression: ts.Expression): ts.ClassLikeDeclaration | undefined => {
    let symbol = checker.getSymbolAtLocation(expression);
    if (symbol && symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
    const declaration = symbol?.declarations?.find((d) => ts.isClassLike(d));
    return declaration as ts.ClassLikeDeclaration | undefined;
  };

  const at = (node: ts.Node, reason: string): string => {
    const { file, line } = where(node);
    return `${file}:${line}: ${node.getText()} ${reason}`;
  };

  const thrown: CodeSite[] = [];
  const compared: CodeSite[] = [];
  const unresolved: Unresolved[] = [];

  /** The literal codes an expression can evaluate to; `undefined` when it cannot be followed. */
  const resolve = (expression: ts.Expression, depth: number, via: string, seen: Set<ts.Node>): CodeSite[] | "passthrough" | string => {
    if (depth > 8) return at(expression, "is passed through more than 8 functions");
    const e = skipOuter(expression);
    if (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) return [{ code: e.text, ...where(e), via }];
    if (ts.isConditionalExpression(e)) return merge([resolve(e.whenTrue, depth, via, seen), resolve(e.whenFalse, depth, via, seen)]);
    if (ts.isBinaryExpression(e) && (e.operatorToken.kind === ts.SyntaxKind.QuestionQuestionToken || e.operatorToken.kind === ts.SyntaxKind.BarBarToken)) {
      return merge([resolve(e.left, depth, via, seen), resolve(e.right, depth, via, seen)]);
    }
    if (ts.isPropertyAccessExpression(e) && e.name.text === "code") return "passthrough";
    if (ts.isTemplateExpression(e)) {
      let values: { text: string; at: ts.Node }[] = [{ text: e.head.text, at: e }];
      for (const span of e.templateSpans) {
        const part = resolve(span.expression, depth, via, seen);
        if (part === "passthrough") return at(span.expression, "is a template part that is not a literal code part (use a literal, a const or a parameter fed literals)");
        if (typeof part === "string") return part;
        values = values.flatMap((v) => part.map((p) => ({ text: v.text + p.code + span.literal.text, at: v.at })));
      }
      return values.map((v) => ({ code: v.text, ...where(v.at), via }));
    }
    if (ts.isIdentifier(e)) {
      const symbol = checker.getSymbolAtLocation(e);
      const declaration = symbol?.valueDeclaration ?? symbol?.declarations?.[0];
      if (!declaration) return at(e, "has no declaration the scan can see");
      if (seen.has(declaration)) return [];
      seen.add(declaration);
      if (ts.isVariableDeclaration(declaration) && declaration.initializer && ts.getCombinedNodeFlags(declaration) & ts.NodeFlags.Const) {
        return resolve(declaration.initializer, depth + 1, via, seen);
      }
      // const [status, code] = cond ? [403, "a.b"] : [400, "a.c"];
      if (ts.isBindingElement(declaration) && ts.isArrayBindingPattern(declaration.parent)) {
        const variable = declaration.parent.parent;
        const index = declaration.parent.elements.indexOf(declaration);
        if (ts.isVariableDeclaration(variable) && variable.initializer && ts.getCombinedNodeFlags(variable) & ts.NodeFlags.Const) {
          const elements = arrayElements(variable.initializer, index);
          if (elements) return merge(elements.map((element) => resolve(element, depth + 1, via, seen)));
        }
      }
      if (ts.isParameter(declaration)) {
        const fn = declaration.parent as Callable;
        const index = fn.parameters.indexOf(declaration);
        const results: (CodeSite[] | "passthrough" | string)[] = [];
        if (declaration.initializer) results.push(resolve(declaration.initializer, depth + 1, via, seen));
        const calls = callsOf.get(fn) ?? [];
        if (calls.length === 0 && !declaration.initializer) return at(e, "is a parameter of a function nothing in the scanned sources calls");
        for (const call of calls) {
          const argument = call.arguments?.[index];
          if (argument && !ts.isSpreadElement(argument)) results.push(resolve(argument, depth + 1, via, seen));
        }
        return merge(results);
      }
      return at(e, "is neither a const with a literal value nor a parameter");
    }
    return at(e, `is a ${ts.SyntaxKind[e.kind]}, not a string literal, a const or a parameter`);
  };

  const record = (argument: ts.Expression, via: string, facts: Pick<CodeSite, "retryable" | "status"> = {}): void => {
    const result = resolve(argument, 0, via, new Set());
    if (result === "passthrough") return;
    if (typeof result === "string") {
      unresolved.push({ ...where(argument), text: argument.getText(), reason: result });
      return;
    }
    for (const found of result) {
      const site: CodeSite = { ...found, ...facts };
      const key = `${site.code} ${site.file}:${site.line}`;
      const index = seenSites.get(key);
      if (index === undefined) {
        seenSites.set(key, thrown.length);
        thrown.push(site);
      } else if (thrown[index]!.retryable === "dynamic" && typeof site.retryable === "boolean") {
        // The same literal reached through a subclass's super(…) and through its own `new`: keep the more precise facts.
        thrown[index] = site;
      }
    }
  };
  const seenSites = new Map<string, number>();

  // Pass 1: index calls by the declaration they call.
  for (const sf of sources) {
    const visit = (node: ts.Node): void => {
      if ((ts.isCallExpression(node) || ts.isNewExpression(node))) {
        const declaration = calledDeclaration(node);
        if (declaration) {
          const list = callsOf.get(declaration) ?? [];
          list.push(node);
          callsOf.set(declaration, list);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }

  // Pass 2: the sinks.
  for (const sf of sources) {
    const visit = (node: ts.Node): void => {
      if (ts.isNewExpression(node)) {
        const cls = classOf(node.expression);
        if (cls?.name?.text === "TackError" && isTackErrorClass(cls)) {
          const argument = node.arguments?.[0];
          if (argument) record(argument, "new TackError", { retryable: retryableOf(node.arguments?.[2]) });
        } else if (cls?.name?.text === "GatewayError" && isTackErrorClass(cls)) {
          // GatewayError(status, code, message, options): retryable is status >= 500.
          const argument = node.arguments?.[1];
          const status = node.arguments?.[0];
          const literal = status && ts.isNumericLiteral(skipOuter(status)) ? Number((skipOuter(status) as ts.NumericLiteral).text) : undefined;
          if (argument) record(argument, "new GatewayError", literal === undefined ? { retryable: "dynamic" } : { retryable: literal >= 500, status: literal });
        }
      } else if (ts.isCallExpression(node)) {
        if (node.expression.kind === ts.SyntaxKind.SuperKeyword) {
          const cls = ts.findAncestor(node, ts.isClassLike);
          const declaration = calledDeclaration(node);
          const base = declaration && ts.isConstructorDeclaration(declaration) ? declaration.parent : undefined;
          // super(code, …) of a direct TackError subclass; deeper subclasses pass through their own parameters.
          if (cls && base && base.name?.text === "TackError" && isTackErrorClass(base) && node.arguments[0]) record(node.arguments[0], "super", { retryable: retryableOf(node.arguments[2]) });
        } else if (ts.isPropertyAccessExpression(node.expression) && node.expression.name.text === "from" && node.arguments[1]) {
          const cls = classOf(node.expression.expression);
          // from(error, code) keeps a TackError as it is and wraps anything else, not retryable.
          if (cls && isTackErrorClass(cls)) record(node.arguments[1], "TackError.from", { retryable: false });
        }
      } else if (ts.isObjectLiteralExpression(node)) {
        // A wire error written by hand: { code: "<literal>", message: … }.
        const props = new Map(node.properties.filter(ts.isPropertyAssignment).map((p) => [p.name.getText(), p.initializer] as const));
        const code = props.get("code");
        if (code && props.has("message") && (ts.isStringLiteral(code) || ts.isNoSubstitutionTemplateLiteral(code)) && CODE_SHAPE.test(code.text)) {
          thrown.push({ code: code.text, ...where(code), via: "{ code, message }" });
        }
      } else if (ts.isBinaryExpression(node) && isEquality(node.operatorToken.kind)) {
        for (const [side, other] of [[node.left, node.right], [node.right, node.left]] as const) {
          if (isCodeAccess(side) && (ts.isStringLiteral(other) || ts.isNoSubstitutionTemplateLiteral(other))) {
            compared.push({ code: other.text, ...where(other), via: "===" });
          }
        }
      } else if (ts.isSwitchStatement(node) && isCodeAccess(node.expression)) {
        for (const clause of node.caseBlock.clauses) {
          if (ts.isCaseClause(clause) && ts.isStringLiteral(clause.expression)) compared.push({ code: clause.expression.text, ...where(clause.expression), via: "case" });
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return { thrown, compared, unresolved, files: sources.length };
}

/** The expressions at `index` of the array literals an initialiser can be (through `a ? [..] : [..]`). */
function arrayElements(e: ts.Expression, index: number): ts.Expression[] | undefined {
  const inner = skipOuter(e);
  if (ts.isConditionalExpression(inner)) {
    const a = arrayElements(inner.whenTrue, index);
    const b = arrayElements(inner.whenFalse, index);
    return a && b ? [...a, ...b] : undefined;
  }
  if (ts.isArrayLiteralExpression(inner)) {
    const element = inner.elements[index];
    return element && !ts.isSpreadElement(element) ? [element] : undefined;
  }
  return undefined;
}

/** What a TackError's options argument sets `retryable` to (absent: false). */
function retryableOf(options: ts.Expression | undefined): boolean | "dynamic" {
  if (!options) return false;
  const inner = skipOuter(options);
  if (!ts.isObjectLiteralExpression(inner)) return "dynamic";
  if (inner.properties.some((p) => ts.isSpreadAssignment(p))) return "dynamic";
  const property = inner.properties.find((p) => p.name?.getText() === "retryable");
  if (!property) return false;
  if (!ts.isPropertyAssignment(property)) return "dynamic";
  const value = skipOuter(property.initializer);
  if (value.kind === ts.SyntaxKind.TrueKeyword) return true;
  if (value.kind === ts.SyntaxKind.FalseKeyword) return false;
  return "dynamic";
}

function skipOuter(e: ts.Expression): ts.Expression {
  while (ts.isParenthesizedExpression(e) || ts.isAsExpression(e) || ts.isSatisfiesExpression(e) || ts.isNonNullExpression(e) || ts.isTypeAssertionExpression(e)) e = e.expression;
  return e;
}

function isEquality(kind: ts.SyntaxKind): boolean {
  return kind === ts.SyntaxKind.EqualsEqualsEqualsToken || kind === ts.SyntaxKind.ExclamationEqualsEqualsToken
    || kind === ts.SyntaxKind.EqualsEqualsToken || kind === ts.SyntaxKind.ExclamationEqualsToken;
}

/** `x.code` or `x?.code` (an error's code being compared). */
function isCodeAccess(e: ts.Expression): boolean {
  const inner = skipOuter(e);
  return ts.isPropertyAccessExpression(inner) && inner.name.text === "code";
}

function merge(results: (CodeSite[] | "passthrough" | string)[]): CodeSite[] | "passthrough" | string {
  const failure = results.find((r): r is string => typeof r === "string" && r !== "passthrough");
  if (failure) return failure;
  const sites = results.filter((r): r is CodeSite[] => Array.isArray(r)).flat();
  if (sites.length === 0 && results.includes("passthrough")) return "passthrough";
  return sites;
}
